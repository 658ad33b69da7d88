"""keras_vit's serving paths (`serving_paths.py`): one model's exports made once, then each file timed or
evaluated in its own process.

Tasks (spec["task"]):
    prepare: the timing model (a random-weight ViT-B/16, or the --quick tiny ViT) saved as `.keras`, and 64
        calibration images for the int8 OpenVINO export (not timed).
    prepare_accuracy: the test split of an ImageFolder read into one `.npz` (pixels, labels), the float32 Keras
        model's top-1 on it (the reference of every path's agreement), and 64 calibration images of the train split.
    export: every path of `PATHS` written from the `.keras` (one process; a failing path is reported, not fatal).
    serve: one path's file loaded and timed at each batch size on float32 pixels 0..255.
    accuracy: one path's file evaluated on the `.npz`: top-1 accuracy and agreement with the Keras float32 top-1.
    int8_matmul: an (n, n) x (n, n) int8 product, the int8 GEMM ceiling: ONNX Runtime `MatMulInteger` (uint8 x
        int8 -> int32) or OpenVINO (FakeQuantize'd operands, which its CPU plugin runs as an int8 matmul; the
        layer's runtime precision is recorded so the report can say when it did not).
Every engine runs on `spec["threads"]` threads (TensorFlow: intra-op `threads`, inter-op 1).
"""

import os
import time

import numpy as np

import measure

# path name -> (engine, precision); the file each export writes is `<workdir>/exports/<name with / as _>`.
PATHS = {
    "savedmodel/float32": ("SavedModel", "float32"),
    "savedmodel/bfloat16": ("SavedModel", "bfloat16"),
    "savedmodel/bfloat16-variables": ("SavedModel", "bfloat16"),  # freeze_weights=False: weights as variables
    "tflite/float32": ("TFLite", "float32"),
    "tflite/dynamic_int8": ("TFLite", "dynamic int8"),
    "onnxruntime/float32": ("ONNX Runtime", "float32"),
    "onnxruntime/dynamic_int8": ("ONNX Runtime", "dynamic int8"),
    "openvino/float32": ("OpenVINO", "float32"),
    "openvino/bfloat16": ("OpenVINO", "bfloat16"),
    "openvino/int8": ("OpenVINO", "int8"),
}
CALIBRATION_IMAGES = 64


def export_file(exports, path):
    """Where the export of `path` lives under the folder `exports`."""
    suffix = {"tflite": ".tflite", "onnxruntime": ".onnx"}.get(path.split("/")[0], "")
    return os.path.join(exports, path.replace("/", "_") + suffix)


def _tensorflow(threads):
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    return tf


def _pixels(batch, size, seed=1):
    return np.random.default_rng(seed).uniform(0, 255, (batch, size, size, 3)).astype("float32")


def _write_pngs(images, folder):
    from PIL import Image

    os.makedirs(folder, exist_ok=True)
    for i, image in enumerate(images):
        Image.fromarray(np.asarray(image, np.uint8)).save(os.path.join(folder, f"{i:03d}.png"))


def _prepare(spec):
    """The random-weight timing model as `.keras` and its calibration images (varied, not noise only)."""
    _tensorflow(spec["threads"])
    import keras

    import keras_vit
    from runner_keras_vit import _varied_images

    keras.utils.set_random_seed(0)
    if spec["quick"]:
        model = keras_vit.ViT(classifier_activation=None, **spec["arch"])
    else:
        model = keras_vit.ViT_B16(weights=None, classifier_activation=None)
    head = keras_vit.model_parts.head(model)  # zero-initialised; random values make the logits informative
    head.kernel.assign(np.random.default_rng(0).normal(0.0, 0.02, head.kernel.shape).astype("float32"))
    model.save(spec["model"])
    varied = _varied_images(CALIBRATION_IMAGES, {"image_size": spec["arch"]["image_size"]})
    _write_pngs(np.round((varied + 1) * 127.5), spec["calibration"])
    return {"batches": [], "extra": {"model": spec["model"], "parameters": model.count_params()}}


def _read_split(root, split, size, limit=None):
    """(pixels (n, size, size, 3) uint8, labels) of an ImageFolder split; classes in sorted order (the app's)."""
    import tensorflow as tf

    train = os.path.join(root, "train")
    classes = sorted(d for d in os.listdir(train) if os.path.isdir(os.path.join(train, d)))
    pixels, labels = [], []
    for label, name in enumerate(classes):
        folder = os.path.join(root, split, name)
        names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
        for file in names[:limit]:
            image = tf.io.decode_image(tf.io.read_file(os.path.join(folder, file)), channels=3, expand_animations=False)
            if image.shape[:2] != (size, size):
                image = tf.cast(tf.round(tf.image.resize(image, (size, size))), tf.uint8)
            pixels.append(image.numpy())
            labels.append(label)
    return np.stack(pixels), np.asarray(labels), classes


def _prepare_accuracy(spec):
    """The test split as `.npz`, the Keras float32 model's top-1 on it, and calibration images from `train/`."""
    _tensorflow(spec["threads"])
    import keras

    from keras_vit.checkpoints.own import load_keras_model
    from keras_vit.export import signatures

    keras.config.set_dtype_policy("float32")
    model = load_keras_model(spec["model"])
    size = int(model.input_shape[1])
    pixels, labels, classes = _read_split(spec["data"], "test", size)
    reference = _predict(_keras_predictor(model, signatures), pixels)
    per_class = -(-CALIBRATION_IMAGES // len(classes))
    calibration, _, _ = _read_split(spec["data"], "train", size, limit=per_class)
    _write_pngs(calibration[np.random.default_rng(0).permutation(len(calibration))[:CALIBRATION_IMAGES]],
                spec["calibration"])
    np.savez(spec["test_set"], pixels=pixels, labels=labels, reference_top1=reference)
    return {"batches": [], "extra": {"images": len(labels), "classes": classes, "image_size": size,
                                     "top1_accuracy": float(np.mean(reference == labels)), "agreement": 1.0}}


def _keras_predictor(model, signatures):
    import tensorflow as tf

    forward = tf.function(signatures.pixels_to_outputs(model, signatures.inspect_model(model, "auto")))
    return lambda x: forward(tf.constant(x)).numpy()


def _export(spec):
    """Every path's file from the `.keras`; each path's error (if any) is recorded and the others go on."""
    _tensorflow(spec["threads"])
    import keras

    import keras_vit.export as export
    from keras_vit.checkpoints.own import load_keras_model

    keras.config.set_dtype_policy("float32")
    model = load_keras_model(spec["model"])
    exports, done = spec["exports"], {}
    for path in spec["paths"]:
        target, start = export_file(exports, path), time.perf_counter()
        try:
            kind, precision = path.split("/")
            precision, _, variant = precision.partition("-")
            if kind == "savedmodel":
                target = export.export_saved_model(model, target, version=1, precision=precision, overwrite=True,
                                                   freeze_weights=False if variant == "variables" else "auto")
            elif kind == "tflite":
                export.export_tflite(model, target, quantize=None if precision == "float32" else precision,
                                     overwrite=True)
            elif kind == "onnxruntime" and precision == "float32":
                export.export_onnx(model, target, overwrite=True)
            elif kind == "onnxruntime":
                source = export_file(exports, "onnxruntime/float32")
                if not os.path.exists(source):
                    export.export_onnx(model, source)
                done[path] = {"quantized_nodes": _quantize_onnx(source, target)}
            else:
                target = export.export_openvino(
                    model, target, version=1, precision=precision, overwrite=True,
                    calibration_images=spec["calibration"] if precision == "int8" else None)
            done.setdefault(path, {}).update(file=target, seconds=round(time.perf_counter() - start, 1))
        except Exception as error:  # noqa: BLE001  (one failing exporter leaves the others measured)
            done[path] = {"error": f"{type(error).__name__}: {error}"[:500]}
    return {"batches": [], "extra": {"exports": done}}


def _quantize_onnx(source, target):
    """ONNX Runtime's dynamic quantization (int8 weights, activations quantized per call) of `source`, after its
    pre-processing (`quant_pre_process`: constant folding, which makes tf2onnx's q/k/v/out weights constants) and
    with the `Gemm`s rewritten as MatMul (+ Add): dynamic quantization quantizes MatMul, not Gemm, which would leave
    the projections and the MLP in float32. Returns the op counts of the quantized file."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    folded = target + ".folded.onnx"
    quant_pre_process(source, folded, skip_symbolic_shape=True)
    onnx.save(_gemm_as_matmul(onnx.load(folded)), folded)
    quantize_dynamic(folded, target, weight_type=QuantType.QInt8)
    os.remove(folded)
    kinds = [node.op_type for node in onnx.load(target).graph.node]
    return {kind: kinds.count(kind) for kind in ("MatMulInteger", "DynamicQuantizeLinear", "MatMul", "Gemm")}


def _gemm_as_matmul(model):
    """`model` with each Gemm of a constant B, alpha 1 and A not transposed as MatMul (+ Add of a beta-1 C)."""
    from onnx import helper, numpy_helper

    graph = model.graph
    weights = {tensor.name: tensor for tensor in graph.initializer}
    nodes = []
    for node in graph.node:
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        bias = len(node.input) > 2 and node.input[2] and attributes.get("beta", 1.0) != 0.0
        if (node.op_type != "Gemm" or node.input[1] not in weights or attributes.get("transA", 0)
                or attributes.get("alpha", 1.0) != 1.0 or (bias and attributes.get("beta", 1.0) != 1.0)):
            nodes.append(node)
            continue
        weight = numpy_helper.to_array(weights[node.input[1]])
        weight = weight.T if attributes.get("transB", 0) else weight
        graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(weight), node.name + "_weight"))
        product = node.output[0] + "_matmul" if bias else node.output[0]
        nodes.append(helper.make_node("MatMul", [node.input[0], node.name + "_weight"], [product],
                                      name=node.name + "_matmul"))
        if bias:
            nodes.append(helper.make_node("Add", [product, node.input[2]], [node.output[0]], name=node.name + "_bias"))
    del graph.node[:]
    graph.node.extend(nodes)
    return model


def _predictor(path, file, threads):
    """(predict(float32 pixels (B, H, W, 3)) -> first output as numpy, extra facts about the loaded engine)."""
    kind = path.split("/")[0]
    if kind == "savedmodel":
        tf = _tensorflow(threads)
        signature = tf.saved_model.load(file).signatures["predict_images"]
        input_name = list(signature.structured_input_signature[1])[0]
        return lambda x: next(iter(signature(**{input_name: tf.constant(x)}).values())).numpy(), {}
    if kind == "tflite":
        try:
            from ai_edge_litert.interpreter import Interpreter
        except ImportError:
            Interpreter = _tensorflow(threads).lite.Interpreter
        interpreter = Interpreter(model_path=file, num_threads=threads)
        source, shape = interpreter.get_input_details()[0]["index"], [None]
        target = interpreter.get_output_details()[0]["index"]

        def tflite(x):
            if shape[0] != x.shape:
                interpreter.resize_tensor_input(source, x.shape)
                interpreter.allocate_tensors()
                shape[0] = x.shape
            interpreter.set_tensor(source, x)
            interpreter.invoke()
            return interpreter.get_tensor(target)

        return tflite, {"interpreter": Interpreter.__module__}
    if kind == "onnxruntime":
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        session = onnxruntime.InferenceSession(file, options, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        return lambda x: session.run(None, {name: x})[0], {"onnxruntime": onnxruntime.__version__}
    from keras_vit.export.openvino import compile_model

    compiled = compile_model(file, threads=threads)  # applies the IR's recorded INFERENCE_PRECISION_HINT
    request = compiled.create_infer_request()

    def openvino(x):
        request.infer({0: x})
        return request.get_output_tensor(0).data.copy()

    hint = compiled.get_property("INFERENCE_PRECISION_HINT")
    hint = hint.to_string() if hasattr(hint, "to_string") else str(hint)
    return openvino, {"inference_precision_hint": hint, "threads": int(compiled.get_property("INFERENCE_NUM_THREADS"))}


def _serve(spec):
    predict, extra = _predictor(spec["path"], spec["file"], spec["threads"])
    batches = []
    for batch in spec["batches"]:
        x = _pixels(batch, spec["image_size"])
        seconds = measure.time_calls(lambda: predict(x), spec["warmup"], spec["iters"][str(batch)])
        batches.append(measure.batch_result(seconds, batch))
    return {"batches": batches, "extra": extra}


def _predict(predict, pixels, chunk=64):
    """Top-1 classes of `pixels` (uint8) through `predict`, `chunk` images per call."""
    tops = [np.argmax(predict(pixels[i:i + chunk].astype(np.float32)), -1) for i in range(0, len(pixels), chunk)]
    return np.concatenate(tops)


def _accuracy(spec):
    predict, extra = _predictor(spec["path"], spec["file"], spec["threads"])
    data = np.load(spec["test_set"])
    start = time.perf_counter()
    top1 = _predict(predict, data["pixels"])
    return {"batches": [], "extra": {
        **extra, "images": len(top1), "top1_accuracy": float(np.mean(top1 == data["labels"])),
        "agreement": float(np.mean(top1 == data["reference_top1"])), "seconds": time.perf_counter() - start}}


def _int8_matmul(spec):
    n, rng = spec["n"], np.random.default_rng(0)
    a = rng.integers(0, 256, (n, n)).astype(np.uint8)
    b = rng.integers(-127, 128, (n, n)).astype(np.int8)
    if spec["engine"] == "onnxruntime":
        import onnxruntime
        from onnx import TensorProto, helper, numpy_helper

        graph = helper.make_graph(
            [helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "int8_matmul",
            [helper.make_tensor_value_info("a", TensorProto.UINT8, [n, n])],
            [helper.make_tensor_value_info("y", TensorProto.INT32, [n, n])], [numpy_helper.from_array(b, "b")])
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = spec["threads"], 1
        session = onnxruntime.InferenceSession(helper.make_model(graph).SerializeToString(), options,
                                               providers=["CPUExecutionProvider"])
        call, extra = lambda: session.run(None, {"a": a}), {"kernel": "MatMulInteger u8 x s8 -> s32"}
    else:
        import openvino as ov
        import openvino.opset13 as ops

        x = ops.parameter([n, n], np.float32, name="a")
        quantized = ops.fake_quantize(x, 0.0, 255.0, 0.0, 255.0, 256)
        weights = ops.fake_quantize(ops.constant(b.astype(np.float32)), -128.0, 127.0, -128.0, 127.0, 256)
        compiled = ov.Core().compile_model(ov.Model([ops.matmul(quantized, weights, False, False)], [x]), "CPU",
                                           {"INFERENCE_NUM_THREADS": spec["threads"]})
        request, a = compiled.create_infer_request(), a.astype(np.float32)
        call = lambda: request.infer({0: a})  # noqa: E731
        layers = [(op.get_rt_info()["layerType"].astype(str), op.get_rt_info()["runtimePrecision"].astype(str))
                  for op in compiled.get_runtime_model().get_ordered_ops()]
        matmuls = [precision for kind, precision in layers if kind in ("FullyConnected", "MatMul")]
        extra = {"kernel": "FakeQuantize u8 x i8 -> MatMul", "matmul_runtime_precision": matmuls,
                 "int8": bool(matmuls) and all(p in ("u8", "i8") for p in matmuls)}
    seconds = measure.time_calls(call, spec["warmup"], spec["iters"]["1"])
    return {"batches": [measure.batch_result(seconds, 1)], "extra": extra}


TASKS = {"prepare": _prepare, "prepare_accuracy": _prepare_accuracy, "export": _export, "serve": _serve,
         "accuracy": _accuracy, "int8_matmul": _int8_matmul}


def run(spec):
    return TASKS[spec["task"]](spec)
