import torch

# The suite runs tiny models whose ops are dominated by per-call overhead; one intra-op thread is as fast and
# does not fight a second process for the machine's two cores.
torch.set_num_threads(1)
