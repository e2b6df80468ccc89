def backward_micro_step(loss, scaler, accumulation_steps):
    scaler.scale(loss / accumulation_steps).backward()
