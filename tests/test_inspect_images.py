"""The image reading of `python -m keras_vit.inspect`: decoding bounded as the served model bounds it."""

import numpy as np
import pytest

from bomb_fixtures import gif_of_frames, progressive_jpeg

pytest.importorskip("PIL")


def test_images_over_a_decoding_limit_are_refused_before_decoding_naming_the_file(tmp_path, monkeypatch):
    from keras_vit.inspect.__main__ import load_images

    bomb, fine, gif = tmp_path / "scans.jpg", tmp_path / "fine.jpg", tmp_path / "frames.gif"
    bomb.write_bytes(progressive_jpeg(16, repeats=7))  # 17 scans
    fine.write_bytes(progressive_jpeg(16))  # 10 scans
    gif.write_bytes(gif_of_frames(11))
    monkeypatch.setenv("KERAS_VIT_MAX_JPEG_SCANS", "12")
    monkeypatch.setenv("KERAS_VIT_MAX_GIF_BLOCKS", "40")
    assert load_images([str(fine)], (8, 8)).shape == (1, 8, 8, 3)
    with pytest.raises(ValueError, match=rf"The image {bomb} cannot be read within the decoding limits: progressive "
                                         r"JPEG of more than 12 scans.*KERAS_VIT_MAX_JPEG_SCANS=N raises it"):
        load_images([str(fine), str(bomb)], (8, 8))
    with pytest.raises(ValueError, match="GIF of more than 40 blocks"):
        load_images([str(gif)], (8, 8))
    monkeypatch.setenv("KERAS_VIT_MAX_JPEG_SCANS", "20")
    assert np.isfinite(load_images([str(bomb)], (8, 8))).all()
