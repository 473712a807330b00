"""The dual-head residual network f_theta(s) = (p, v) of AlphaGo Zero.

Architecture (Silver et al. 2017, Methods, "Neural network architecture"):

- input: 17 binary planes of N x N (8 own-stone history planes, 8 opponent planes, 1 colour plane);
- one convolutional block: 3x3 conv with F filters, batch norm, ReLU;
- B residual blocks: 3x3 conv, BN, ReLU, 3x3 conv, BN, skip addition, ReLU (with
  ``global_pooling``, every second one also adds biases pooled over the board: KataGo's);
- policy head: 1x1 conv with 2 filters, BN, ReLU, fully connected -> N*N + 1 logits (last = pass);
- value head: 1x1 conv with 1 filter, BN, ReLU, FC -> 256 (``value_hidden``), ReLU, FC -> 1, tanh.

The paper uses F = 256 and B = 19 or 39 on 19 x 19; small boards use smaller towers (params.yaml).
Convolutions followed by batch norm carry no bias: BN's shift makes it redundant.

Its file format is `model.checkpoint`'s.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_eval

from tabula.config import Config
from tabula.features import Inputs
from tabula.go.coords import MAX_SIZE, MIN_SIZE

#: A checkpoint's ``network`` entry: these ints always, these flags (as 1) only when set.
SHAPE_KEYS = ("board_size", "blocks", "filters", "value_hidden")
FLAG_KEYS = ("aux", "global_pooling", "liberties", "ladders")


@dataclass(frozen=True)
class NetworkShape:
    """The shape of a `PolicyValueNet`: what its constructor takes, its checkpoint's
    ``network`` entry records and a Lightning checkpoint's hyper-parameters hold.

    board_size: N, in [MIN_SIZE, MAX_SIZE]; blocks: residual blocks B >= 0; filters: F >= 1;
    value_hidden: the value head's hidden units (paper 256), >= 1; aux: the ownership and score
    heads (KataGo); global_pooling: every second block a `GlobalPoolingBlock` (KataGo);
    liberties: the input has the 6 liberty planes after the 17 (`tabula.features`); ladders:
    the 3 ladder planes after those. Raises ValueError for a shape no network has.
    """

    board_size: int
    blocks: int
    filters: int
    value_hidden: int = 256
    aux: bool = False
    global_pooling: bool = False
    liberties: bool = False
    ladders: bool = False

    def __post_init__(self) -> None:
        if not MIN_SIZE <= self.board_size <= MAX_SIZE:
            raise ValueError(f"board_size must be in {MIN_SIZE}..{MAX_SIZE}, got {self.board_size}")
        if self.blocks < 0 or self.filters < 1 or self.value_hidden < 1:
            raise ValueError(
                f"need blocks >= 0, filters >= 1, value_hidden >= 1; got {self.blocks}, "
                f"{self.filters}, {self.value_hidden}"
            )

    @classmethod
    def of(cls, cfg: Config, iteration: int = 0) -> NetworkShape:
        """The shape ``cfg`` asks for: its board size and ``network`` section, with the
        blocks of the network iteration ``iteration`` trains (``network.grow``; 0: the
        initial network)."""
        n = cfg.network
        return cls(cfg.rules.board_size, n.blocks_at(iteration), n.filters, n.value_hidden,
                   n.aux_heads, n.global_pooling, n.liberties, n.ladders)  # fmt: skip

    @property
    def inputs(self) -> Inputs:
        """The planes derived from the position that the network takes after the 17."""
        return Inputs(self.liberties, self.ladders)

    def grows_from(self, other: NetworkShape) -> bool:
        """Whether this shape is ``other`` with more residual blocks (`deepened`)."""
        return self.blocks > other.blocks and replace(other, blocks=self.blocks) == self

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> NetworkShape:
        """The shape a checkpoint's ``network`` entry (or a Lightning checkpoint's
        hyper-parameters) records: each shape key an int, each flag False where absent
        (written without it, or before it existed). ValueError for a missing or bad key."""
        bad = [k for k in SHAPE_KEYS if type(entry.get(k)) is not int]
        if bad:
            raise ValueError(f"the network entry must give ints for {SHAPE_KEYS} (not {bad})")
        board_size, blocks, filters, value_hidden = (int(entry[k]) for k in SHAPE_KEYS)
        aux, pooling, liberties, ladders = (bool(entry.get(k, 0)) for k in FLAG_KEYS)
        return cls(board_size, blocks, filters, value_hidden, aux, pooling, liberties, ladders)

    def to_entry(self) -> dict[str, int]:
        """The checkpoint's ``network`` entry: the flags only when set, so that checkpoints
        without them read as before."""
        shape = {k: getattr(self, k) for k in SHAPE_KEYS}
        return shape | {k: 1 for k in FLAG_KEYS if getattr(self, k)}

    def to_dict(self) -> dict[str, Any]:
        """Every field, flags as bools (a Lightning checkpoint's hyper-parameters, messages)."""
        return {k: getattr(self, k) for k in (*SHAPE_KEYS, *FLAG_KEYS)}


class ResidualBlock(nn.Module):
    """conv3x3-BN-ReLU-conv3x3-BN, add the block's input, ReLU (paper, Methods)."""

    def __init__(self, filters: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(filters, filters, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(filters)
        self.conv2 = nn.Conv2d(filters, filters, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(filters)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(x + y)


class GlobalPoolingBlock(ResidualBlock):
    """A residual block whose first convolution also feeds a global pooling branch (KataGo, Wu
    2019, "global pooling"): a 3x3 conv to ``filters // 4`` channels, BN, ReLU, their mean and max
    over the board, and a linear map of those to one bias per channel, added after ``bn1``. It
    lets every point see the whole board (ko threats, the score) at once.
    """

    def __init__(self, filters: int) -> None:
        super().__init__(filters)
        pooled = max(1, filters // 4)
        self.conv_g = nn.Conv2d(filters, pooled, 3, padding=1, bias=False)
        self.bn_g = nn.BatchNorm2d(pooled)
        self.pool_fc = nn.Linear(2 * pooled, filters)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = F.relu(self.bn_g(self.conv_g(x)))
        pooled = torch.cat([g.mean(dim=(2, 3)), g.amax(dim=(2, 3))], dim=1)
        bias = self.pool_fc(pooled)[:, :, None, None]
        y = F.relu(self.bn1(self.conv1(x)) + bias)
        y = self.bn2(self.conv2(y))
        return F.relu(x + y)


class PolicyValueNet(nn.Module):
    """AlphaGo Zero's dual-head ResNet for an N x N board.

    ``forward(x)`` takes ``x: float[B, C, N, N]`` (the planes of ``tabula.features``: C = 17,
    23 with ``shape.liberties``, 3 more with ``shape.ladders``: ``shape.inputs``) and
    returns ``(logits: float[B, N*N + 1], value: float[B])``. Logits are unnormalised (apply
    softmax for p; index N*N is pass); value is tanh-squashed, in [-1, 1], from the side to move.
    Its `NetworkShape` is ``shape``.

    ``shape.global_pooling``: every second residual block is a `GlobalPoolingBlock` (KataGo).

    ``shape.aux``: two auxiliary heads for training (KataGo, Wu 2019, "Accelerating Self-Play
    Learning in Go", section 4.1), which analysis reads (`model.evaluator.Evaluator.evaluate_aux`:
    ``tabula analysis``, ``kata-analyze``) and the exported model (`ExportedNetwork`):
    ``forward_aux`` adds the final
    ownership of each point (a 1x1 convolution of the tower, tanh: +1 the side to move's) and
    the final score margin divided by N*N (linear on the value head's hidden layer).
    """

    def __init__(self, shape: NetworkShape) -> None:
        super().__init__()
        self.shape = shape
        board_size, blocks, filters = shape.board_size, shape.blocks, shape.filters
        value_hidden, global_pooling = shape.value_hidden, shape.global_pooling
        self.board_size = board_size
        m = board_size * board_size
        self.stem = nn.Sequential(
            nn.Conv2d(shape.inputs.planes, filters, 3, padding=1, bias=False),
            nn.BatchNorm2d(filters),
            nn.ReLU(inplace=True),
        )
        self.tower = nn.Sequential(
            *(
                GlobalPoolingBlock(filters) if global_pooling and i % 2 else ResidualBlock(filters)
                for i in range(blocks)
            )
        )
        self.policy_conv = nn.Sequential(
            nn.Conv2d(filters, 2, 1, bias=False), nn.BatchNorm2d(2), nn.ReLU(inplace=True)
        )
        self.policy_fc = nn.Linear(2 * m, m + 1)
        self.value_conv = nn.Sequential(
            nn.Conv2d(filters, 1, 1, bias=False), nn.BatchNorm2d(1), nn.ReLU(inplace=True)
        )
        self.value_fc1 = nn.Linear(m, value_hidden)
        self.value_fc2 = nn.Linear(value_hidden, 1)
        self.aux = shape.aux
        if shape.aux:  # made last, so the other weights are those of the same seed without them
            self.ownership_conv = nn.Conv2d(filters, 1, 1)
            self.score_fc = nn.Linear(value_hidden, 1)

    def _body(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(tower output, policy logits, the value head's hidden layer)."""
        h = self.tower(self.stem(x))
        # flatten(1) yields the logical (C, N, N) order even for channels_last activations.
        logits = self.policy_fc(self.policy_conv(h).flatten(1))
        return h, logits, F.relu(self.value_fc1(self.value_conv(h).flatten(1)))

    def _value(self, v: torch.Tensor) -> torch.Tensor:
        """The value from the head's hidden layer, its last layer in fp32 even under bf16
        autocast: rounded to bf16's 8 bits a value near +-1 moves by up to 1/128, more than
        the gaps between the children's values that the search compares and that the root
        value target records (a no-op in fp32)."""
        with torch.autocast(v.device.type, enabled=False):
            return torch.tanh(self.value_fc2(v.float())).squeeze(1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        _, logits, v = self._body(x)
        return logits, self._value(v)

    def forward_aux(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``forward``'s outputs, then ownership float[B, N*N] in [-1, 1] and score float[B]
        (the margin from the side to move divided by N*N); needs ``aux``."""
        h, logits, v = self._body(x)
        value = self._value(v)
        ownership = torch.tanh(self.ownership_conv(h)).flatten(1)
        return logits, value, ownership, self.score_fc(v).squeeze(1)


class ExportedNetwork(nn.Module):
    """What a checkpoint's MLflow model computes (`tasks.tracking.registry`): ``forward(x)``
    returns ``(policy, value)`` as `PolicyValueNet.forward` does, and for a network with the
    ownership and score heads also ``ownership`` float[B, N*N] in [-1, 1] (+1: the side to
    move's) and ``score`` float[B], the expected final margin in points (komi included), both
    from the side to move. ``outputs`` names them, in order."""

    def __init__(self, net: PolicyValueNet) -> None:
        super().__init__()
        self.net = net
        self.outputs = ("policy", "value", "ownership", "score")[: 4 if net.aux else 2]

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if not self.net.aux:
            return self.net(x)
        logits, value, ownership, score = self.net.forward_aux(x)
        # The score head predicts the margin divided by N*N (`model.system.auxiliary_loss`).
        return logits, value, ownership, score * (self.net.board_size**2)


def make_network(
    board_size: int,
    blocks: int,
    filters: int,
    seed: int,
    value_hidden: int = 256,
    aux: bool = False,
    global_pooling: bool = False,
    liberties: bool = False,
) -> PolicyValueNet:
    """A freshly initialised network whose weights depend only on ``seed`` (the "random" model).

    The global torch RNG is left untouched: initialisation runs inside a forked RNG state.
    """
    shape = NetworkShape(board_size, blocks, filters, value_hidden, aux, global_pooling, liberties)
    return seeded_network(shape, seed)


def seeded_network(shape: NetworkShape, seed: int) -> PolicyValueNet:
    """A network of ``shape`` whose weights depend only on ``seed``, initialised inside a
    forked RNG state (the global torch RNG is left untouched)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return PolicyValueNet(shape)


def deepened(net: PolicyValueNet, blocks: int, seed: int) -> PolicyValueNet:
    """A copy of ``net`` with residual blocks appended to its tower up to ``blocks``, each
    starting as the identity: the new blocks' weights are those of a network of the new shape
    from ``seed``, but their residual branch ends in a batch norm scaled to zero, so a block
    adds nothing to its (non-negative, post-ReLU) input and the deeper network computes what
    ``net`` does, in training and in evaluation. Training then grows the new blocks from there
    (a residual branch's last scale zero: Goyal et al. 2017; function-preserving growth:
    Net2Net, Chen et al. 2016). ValueError when ``blocks`` is not more than ``net``'s."""
    if blocks <= net.shape.blocks:
        raise ValueError(f"need more than {net.shape.blocks} blocks to deepen, got {blocks}")
    grown = seeded_network(replace(net.shape, blocks=blocks), seed)
    state = grown.state_dict()
    state.update(net.state_dict())  # every layer but the new blocks: the same names and shapes
    grown.load_state_dict(state)
    with torch.no_grad():
        for block in grown.tower[net.shape.blocks :]:
            block.bn2.weight.zero_()
            block.bn2.bias.zero_()
    return grown.train(net.training)


def network_for(cfg: Config, seed: int) -> PolicyValueNet:
    """``make_network`` with the board size and the ``network`` section of ``cfg``."""
    return seeded_network(NetworkShape.of(cfg), seed)


def weights_sha256(net_or_state_dict: nn.Module | Mapping[str, torch.Tensor]) -> str:
    """Hex sha256 over a state dict: for each name in sorted order, name, dtype, shape and bytes.

    Equal hashes mean bit-identical weights and buffers (BN running statistics included), so two
    runs from the same seed and data can be compared byte for byte.
    """
    state = (
        net_or_state_dict.state_dict()
        if isinstance(net_or_state_dict, nn.Module)
        else net_or_state_dict
    )
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        # Viewed as bytes so every dtype (bf16 included, which numpy lacks) hashes the same way.
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def count_parameters(net: nn.Module) -> int:
    """Number of trainable parameters (for logging)."""
    return int(sum(np.prod(p.shape) for p in net.parameters() if p.requires_grad))


def fold_batch_norm(net: PolicyValueNet) -> PolicyValueNet:
    """An eval-mode copy of ``net`` with every BN folded into the conv before it (inference only).

    y = gamma (conv(x) - mu) / sqrt(var + eps) + beta is again a conv with scaled weights and a
    bias, so the copy computes the same function with one pass fewer over each activation
    (about 1.3x faster on CPU). The original network is not modified.
    """
    folded = copy.deepcopy(net).eval()
    pairs: list[tuple[nn.Module, str, str]] = [
        (folded.stem, "0", "1"),
        (folded.policy_conv, "0", "1"),
        (folded.value_conv, "0", "1"),
    ]
    for block in folded.tower:
        pairs += [(block, "conv1", "bn1"), (block, "conv2", "bn2")]
        if isinstance(block, GlobalPoolingBlock):
            pairs.append((block, "conv_g", "bn_g"))
    for parent, conv_name, bn_name in pairs:
        conv, bn = getattr(parent, conv_name), getattr(parent, bn_name)
        setattr(parent, conv_name, fuse_conv_bn_eval(conv, bn))
        setattr(parent, bn_name, nn.Identity())
    return folded
