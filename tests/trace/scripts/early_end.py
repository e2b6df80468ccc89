from _common import amp_step, make

model, optimizer, scaler, x, y = make()
for step in range(3):
    amp_step(model, optimizer, scaler, x, y)
print("done")
