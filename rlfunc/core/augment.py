"""Image augmentations as pure functions of the images and given noise.

:func:`random_shift` is DrQ-v2's ``RandomShiftsAug`` (Yarats et al. 2021,
facebookresearch/drqv2 ``drqv2.py``): pad every image by ``pad`` pixels with
*replicate* padding, then cut out an image of the original size at an integer
offset drawn per sample. The official code does this with a bilinear
``grid_sample`` on an integer grid (an exact shift up to float rounding);
here it is an exact gather: output pixel ``(i, j)`` of sample ``b`` is input
pixel ``(clamp(i + dy_b - pad), clamp(j + dx_b - pad))``, which *is* the
slice ``padded[b, :, dy_b : dy_b + H, dx_b : dx_b + W]`` of the replicate-padded
image (clamping indices is replicate padding). It works on any dtype (uint8
frames need no conversion) and compiles without graph breaks.

Randomness is explicit: the offsets are an argument (:func:`draw_shift`
draws them on the device, no host round-trip).
"""

from __future__ import annotations

import torch

__all__ = ["random_shift", "draw_shift", "random_crop"]


def draw_shift(
    batch_size: int,
    pad: int,
    *,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Integer offsets ``[B, 2]`` (``dx``, ``dy``) uniform in ``{0, ..., 2 pad}``.

    The order ``(x, y)`` is the official code's (``grid_sample`` grids are
    ``(x, y)``): ``shift = randint(0, 2 * pad + 1, (n, 1, 1, 2))``.
    """
    if pad < 0:
        raise ValueError(f"pad must be >= 0, got {pad}.")
    return torch.randint(0, 2 * pad + 1, (batch_size, 2), generator=generator, device=device)


def _check(images: torch.Tensor, pad: int, noise: torch.Tensor, where: str) -> None:
    if images.dim() != 4:
        raise ValueError(f"{where}: images must be [B, C, H, W], got shape {tuple(images.shape)}.")
    if pad < 0:
        raise ValueError(f"{where}: pad must be >= 0, got {pad}.")
    if tuple(noise.shape) != (images.shape[0], 2):
        raise ValueError(
            f"{where}: noise must be integer offsets [B, 2] = [{images.shape[0]}, 2] (dx, dy), got {tuple(noise.shape)}."
        )
    if noise.is_floating_point():
        raise ValueError(f"{where}: noise must hold integer offsets in [0, 2 * pad], got dtype {noise.dtype}.")


def random_shift(images: torch.Tensor, pad: int, noise: torch.Tensor) -> torch.Tensor:
    """Replicate-pad by ``pad`` and shift every sample by its own integer offset.

    ``images [B, C, H, W]`` (any dtype), ``noise [B, 2]`` integer offsets
    ``(dx, dy)`` in ``[0, 2 pad]`` (:func:`draw_shift`). Returns ``[B, C, H,
    W]`` of the same dtype with ``out[b] == F.pad(images, (pad,) * 4,
    mode="replicate")[b, :, dy : dy + H, dx : dx + W]`` exactly. Offsets
    outside ``[0, 2 pad]`` are clamped into it.
    """
    _check(images, pad, noise, "random_shift")
    b, c, h, w = images.shape
    offs = torch.clamp(noise.to(torch.int64), 0, 2 * pad) - pad  # [B, 2] in [-pad, pad]
    rows = torch.clamp(torch.arange(h, device=images.device).unsqueeze(0) + offs[:, 1:2], 0, h - 1)  # [B, H]
    cols = torch.clamp(torch.arange(w, device=images.device).unsqueeze(0) + offs[:, 0:1], 0, w - 1)  # [B, W]
    flat = (rows.unsqueeze(2) * w + cols.unsqueeze(1)).reshape(b, 1, h * w).expand(b, c, h * w)
    return torch.gather(images.reshape(b, c, h * w), 2, flat).reshape(b, c, h, w)


def random_crop(images: torch.Tensor, size: int, noise: torch.Tensor) -> torch.Tensor:
    """Crop ``size x size`` windows at integer offsets ``noise [B, 2]`` (``dx``, ``dy``).

    RAD / CURL style crop without padding (Laskin et al. 2020; Srinivas et al.
    2020: a larger render cut down, e.g. 100x100 to 84x84); DrQ's own crop
    (Kostrikov et al. 2020) pads first (replicate, 4) and is :func:`random_shift`: ``out[b] ==
    images[b, :, dy : dy + size, dx : dx + size]``; offsets are clamped to
    ``[0, H - size]`` / ``[0, W - size]``.
    """
    if images.dim() != 4:
        raise ValueError(f"random_crop: images must be [B, C, H, W], got shape {tuple(images.shape)}.")
    b, c, h, w = images.shape
    if not 0 < size <= min(h, w):
        raise ValueError(f"random_crop: size must be in [1, {min(h, w)}], got {size}.")
    if tuple(noise.shape) != (b, 2) or noise.is_floating_point():
        raise ValueError(f"random_crop: noise must be integer offsets [B, 2] = [{b}, 2], got {tuple(noise.shape)}.")
    ar = torch.arange(size, device=images.device).unsqueeze(0)
    rows = ar + torch.clamp(noise[:, 1:2].to(torch.int64), 0, h - size)
    cols = ar + torch.clamp(noise[:, 0:1].to(torch.int64), 0, w - size)
    flat = (rows.unsqueeze(2) * w + cols.unsqueeze(1)).reshape(b, 1, size * size).expand(b, c, size * size)
    return torch.gather(images.reshape(b, c, h * w), 2, flat).reshape(b, c, size, size)
