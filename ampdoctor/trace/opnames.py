"""Names of aten ops (``func.overloadpacket.__name__``) that the tracer sorts by: the op census
(which needs torch) and the rules and ``--compare`` (whose parent process never imports torch).
Plain data, no imports."""

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


# aten overload packets (names as ``func.overloadpacket.__name__``) of the ops that autocast
# exists to speed up. ``linear`` and ``matmul`` decompose into these before dispatch.
MATMUL_OPS = frozenset(
    {
        "mm",
        "addmm",
        "bmm",
        "baddbmm",
        "addbmm",
        "mv",
        "addmv",
        "dot",
        "vdot",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
        "_flash_attention_forward",
        "_efficient_attention_forward",
        "_native_multi_head_attention",
    }
    | CONVOLUTION_OPS
)

# Ops whose accuracy or range suffers in float16; autocast keeps them in float32 on CUDA.
SENSITIVE_OPS = frozenset(
    {
        "_softmax",
        "_log_softmax",
        "softmax",
        "log_softmax",
        "native_layer_norm",
        "layer_norm",
        "native_group_norm",
        "group_norm",
        "native_batch_norm",
        "_native_batch_norm_legit",
        "_native_batch_norm_legit_functional",
        "_native_batch_norm_legit_no_training",
        "batch_norm",
        "_batch_norm_with_update",
        "exp",
        "log",
        "log1p",
        "log2",
        "log10",
        "pow",
        "sum",
        "mean",
        "prod",
        "cumsum",
        "var",
        "std",
        "var_mean",
        "std_mean",
        "norm",
        "linalg_vector_norm",
        "logsumexp",
        "nll_loss_forward",
        "nll_loss2d_forward",
        "nll_loss",
        "cross_entropy_loss",
        "mse_loss",
        "l1_loss",
        "smooth_l1_loss",
        "huber_loss",
        "binary_cross_entropy",
        "binary_cross_entropy_with_logits",
        "kl_div",
        "soft_margin_loss",
        "multilabel_margin_loss_forward",
        "multi_margin_loss",
        "cosine_embedding_loss",
        "poisson_nll_loss",
        "margin_ranking_loss",
        "hinge_embedding_loss",
    }
)

# Ops that only ask about metadata or mark profiler ranges: counting them says nothing about
# precision.
METADATA_OPS = frozenset(
    {
        "is_contiguous",
        "sym_is_contiguous",
        "is_strides_like_format",
        "is_non_overlapping_and_dense",
        "size",
        "sym_size",
        "stride",
        "sym_stride",
        "storage_offset",
        "sym_storage_offset",
        "numel",
        "sym_numel",
        "dim",
        "layout",
        "_record_function_enter",
        "_record_function_enter_new",
        "_record_function_exit",
    }
)
