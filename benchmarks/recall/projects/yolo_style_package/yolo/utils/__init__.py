from .torch_utils import de_parallel, save_weights

__all__ = ["de_parallel", "save_weights"]
