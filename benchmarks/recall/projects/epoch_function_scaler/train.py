import torch
import torchvision

import train_utils as utils


def main(args):
    device = torch.device(args.device)
    model = torchvision.models.segmentation.fcn_resnet50(num_classes=21).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=args.lr, momentum=0.9, weight_decay=1e-4)
    data_loader = torch.utils.data.DataLoader([], batch_size=args.batch_size)
    lr_scheduler = torch.optim.lr_scheduler.PolynomialLR(optimizer, total_iters=args.epochs, power=0.9)
    for epoch in range(args.start_epoch, args.epochs):
        utils.train_one_epoch(model, utils.criterion, optimizer, data_loader, lr_scheduler, device, epoch)
        torch.save({"model": model.state_dict(), "epoch": epoch}, f"model_{epoch}.pth")
