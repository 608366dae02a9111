"""Training on this machine: the entry script under torchrun with the SageMaker environment contract."""
