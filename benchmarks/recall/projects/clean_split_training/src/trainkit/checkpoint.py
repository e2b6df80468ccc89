import torch


def save_checkpoint(path, model, optimizer, scaler=None, **extra):
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), **extra}
    if scaler is not None:
        state["scaler"] = scaler.state_dict()
    torch.save(state, path)


def save_for_inference(path, model):
    torch.save({"model": model.state_dict()}, path)


def save_training_state(path, model, optimizer, scaler):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict()}, path)
