"""Names of aten ops (``func.overloadpacket.__name__``) that more than one part of the tracer
sorts by: the op census (which needs torch) and the ``--compare`` rules (which run in a parent
process that never imports torch). Plain data, no imports."""

CONVOLUTION_OPS = frozenset(
    {
        "convolution",
        "_convolution",
        "cudnn_convolution",
        "mkldnn_convolution",
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
    }
)
