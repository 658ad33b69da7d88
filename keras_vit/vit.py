"""`ViT(...)`: the generic Vision Transformer builder; one line per stage of the paper's data path.

    image (B,H,W,C) -> Patches -> PatchEncoder -> TransformerBlock x L -> encoder_norm
        -> pooling ([class] token | mean) -> [pre_logits Dense + tanh] -> head
"""

import keras
import numpy as np

from keras_vit import validation
from keras_vit.layers import Patches, PatchEncoder, TokenPooling, TransformerBlock
from keras_vit.layers.resnet import ResNetStem, resolve_hybrid


def _head_dtype():
    """Logits in float32 under a mixed precision policy (as the Keras mixed-precision guide asks)."""
    policy = keras.config.dtype_policy()
    return "float32" if policy.compute_dtype in ("float16", "bfloat16") else policy


def _model_inputs(input_tensor, shape):
    if input_tensor is None:
        return keras.Input(shape=shape, name="images")
    if not keras.backend.is_keras_tensor(input_tensor):
        raise ValueError(
            "`input_tensor` must be a Keras tensor, e.g. `keras.Input(shape=(224, 224, 3))`. "
            f"Received: input_tensor of type {type(input_tensor).__name__}"
        )
    return input_tensor


def ViT(
    image_size=None,
    patch_size=None,
    hidden_size=None,
    num_layers=None,
    num_heads=None,
    mlp_dim=None,
    classes=None,
    classifier=None,
    representation_size=None,
    include_top=True,
    weights=None,
    input_tensor=None,
    input_shape=None,
    pooling=None,
    classifier_activation="softmax",
    dropout_rate=0.0,
    attention_dropout_rate=0.0,
    drop_path_rate=0.0,
    gelu_approximate=None,
    layer_norm_epsilon=None,
    include_preprocessing=False,
    name=None,
    hybrid=None,
    pos_embed_interpolation="bilinear",
):
    """Builds a Vision Transformer (Dosovitskiy et al., ICLR 2021, arXiv 2010.11929, section 3.1).

    Arguments left at None take their value from the checkpoint when `weights` names one (a published
    name or a checkpoint file), else the ViT-B/16 default shown in brackets.

    Args:
        image_size: int or (height, width); used when `input_shape` and `input_tensor` are None
            [the checkpoint's training resolution, else 224].
        patch_size: P; height and width must be multiples of it [16].
        hidden_size: D, the token width [768].
        num_layers: number of Transformer blocks [12].
        num_heads: attention heads per block [12].
        mlp_dim: hidden width of each block's MLP [3072].
        classes: number of classes of the head (with `include_top=True`) [the checkpoint's, else 1000].
            Different from the checkpoint's: a new zero-initialised head (reported, as resampling).
        classifier: `"token"` (prepend a [class] token and classify from it) or `"gap"` (no class token;
            classify the mean of the patch tokens) ["token"].
        representation_size: width of the tanh `pre_logits` layer before the head (the imagenet21k
            pre-training setup), or None for none [the checkpoint's; with a new head for other classes,
            none: fine-tuning drops pre_logits as the official code does].
        include_top: add pooling, `pre_logits` and the `head`. Without it the model returns the
            normalised tokens (B, T, D), or a (B, D) vector with `pooling`.
        weights: None (random initialisation, no network), a published name (`"imagenet21k"`,
            `"imagenet21k+imagenet2012"`, `"augreg_in21k"`, `"augreg_in21k_ft_in1k"`, ...; see
            `keras_vit.weights`; `"imagenet"` is the variant's best ImageNet-1k fine-tune), the path to an official `.npz`, a timm `.safetensors`, a Hugging Face ViT
            folder or `model.safetensors`, or a Keras `.weights.h5` or `.keras` file of the same architecture.
            Checkpoints are loaded strictly (see `keras_vit.loading`); a different input size resamples the position
            embedding (reported on the "keras_vit" logger at WARNING, printed to stderr by default). A failed
            download raises `keras_vit.WeightsDownloadError`.
        input_tensor: optional Keras tensor (`keras.Input(...)` or a layer output) to use as the image input.
        input_shape: (height, width, channels), channels last; overrides `image_size`.
        pooling: with `include_top=False`: None (tokens), `"token"`, `"avg"` or `"max"` (over patch tokens).
        classifier_activation: activation of the head; None for logits.
        dropout_rate: dropout after the embeddings, the attention output and in the MLP.
        attention_dropout_rate: dropout on the attention probabilities.
        drop_path_rate: stochastic depth; block i uses drop_path_rate * i / (num_layers - 1).
        gelu_approximate: tanh-form GELU (official checkpoints) or exact erf GELU (timm, HF) [the
            checkpoint source's, else True].
        layer_norm_epsilon: epsilon of every LayerNorm [the checkpoint source's, else 1e-6 as the
            official code].
        include_preprocessing: put the official [0, 255] -> [-1, 1] scaling inside the model.
        name: model name.
        hybrid: None for the plain ViT; `"r50"` for the paper's hybrid (section 3.1): the image goes
            through the ResNet-50 stem `resnet_stem` (GroupNorm, weight standardisation) and its feature
            map is cut into patches of size 1; `patch_size` is then the stem's stride (16) and the image
            size must be a multiple of it. A dict of `keras_vit.layers.ResNetStem` arguments builds
            another stem (e.g. a tiny one for tests).
        pos_embed_interpolation: how a checkpoint's position embedding is resampled to another input size:
            `"bilinear"` (the official corner-aligned method, as `scipy.ndimage.zoom(order=1)`) or
            `"bicubic"` (`keras_vit.pos_embed`).

    Returns:
        A `keras.Model`.

    Example:
        >>> model = ViT(image_size=32, patch_size=8, hidden_size=64, num_layers=2, num_heads=4,
        ...             mlp_dim=128, classes=10)
        >>> model.output_shape
        (None, 10)
    """
    arguments = dict(locals())
    if weights is not None:
        from keras_vit import loading

        if not loading.is_keras_weights(weights):
            return loading.build_from_checkpoint(ViT, arguments)
    image_size = 224 if image_size is None else image_size
    patch_size = 16 if patch_size is None else patch_size
    hidden_size = 768 if hidden_size is None else hidden_size
    num_layers = 12 if num_layers is None else num_layers
    num_heads = 12 if num_heads is None else num_heads
    mlp_dim = 3072 if mlp_dim is None else mlp_dim
    classes = 1000 if classes is None else classes
    classifier = "token" if classifier is None else classifier
    gelu_approximate = True if gelu_approximate is None else gelu_approximate
    layer_norm_epsilon = 1e-6 if layer_norm_epsilon is None else layer_norm_epsilon
    for arg in ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim"):
        validation.check_positive_int(arg, locals()[arg])
    if include_top:
        validation.check_positive_int("classes", classes)
    validation.check_choice("classifier", classifier, validation.CLASSIFIERS)
    validation.check_pooling(pooling, classifier)
    if representation_size is not None:
        validation.check_positive_int("representation_size", representation_size)
    for arg in ("dropout_rate", "attention_dropout_rate", "drop_path_rate"):
        validation.check_rate(arg, locals()[arg])
    validation.check_bool("gelu_approximate", gelu_approximate)
    validation.check_positive_number("layer_norm_epsilon", layer_norm_epsilon)
    validation.check_interpolation(pos_embed_interpolation)
    if hidden_size % num_heads:
        raise ValueError(
            f"`hidden_size` must be divisible by `num_heads`. Received: hidden_size={hidden_size}, "
            f"num_heads={num_heads}"
        )
    stem = resolve_hybrid(hybrid, patch_size)
    shape = validation.resolve_input_shape(image_size, input_shape, input_tensor, patch_size)
    use_class_token = classifier == "token"
    drop_path_rates = np.linspace(0.0, drop_path_rate, num_layers) if num_layers > 1 else [drop_path_rate]

    inputs = _model_inputs(input_tensor, shape)
    x = inputs
    if include_preprocessing:
        x = keras.layers.Rescaling(1.0 / 127.5, offset=-1.0, name="preprocessing")(x)
    if stem is not None:
        x = ResNetStem(**stem, name="resnet_stem")(x)
    x = Patches(1 if stem is not None else patch_size, name="patches")(x)
    x = PatchEncoder(hidden_size, use_class_token=use_class_token, dropout_rate=dropout_rate, name="patch_encoder")(x)
    for i in range(num_layers):
        x = TransformerBlock(
            num_heads,
            mlp_dim,
            dropout_rate=dropout_rate,
            attention_dropout_rate=attention_dropout_rate,
            drop_path_rate=float(drop_path_rates[i]),
            layer_norm_epsilon=layer_norm_epsilon,
            gelu_approximate=gelu_approximate,
            name=f"encoder_block_{i}",
        )(x)
    x = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="encoder_norm")(x)
    if include_top:
        x = TokenPooling("token" if use_class_token else "avg", int(use_class_token), name="pooling")(x)
        if representation_size:
            x = keras.layers.Dense(representation_size, activation="tanh", name="pre_logits")(x)
        x = keras.layers.Dense(
            classes,
            activation=classifier_activation,
            kernel_initializer="zeros",
            name="head",
            dtype=_head_dtype(),
        )(x)
    elif pooling:
        x = TokenPooling(pooling, int(use_class_token), name="pooling")(x)

    model_inputs = keras.utils.get_source_inputs(input_tensor) if input_tensor is not None else inputs
    model = keras.Model(model_inputs, x, name=name or "vit")
    if weights is not None:
        from keras_vit import loading

        loading.load_weights(model, weights)
    return model
