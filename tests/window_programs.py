"""A 2-D convolution written with its reduction over (kernel taps, channels), channels
innermost, and the weight copied in that order: the form whose window a CUDA product reads in
16-byte runs from a channels-last copy of the padded input (backends/cuda/render.py,
`_restage_window`). The frontend's conv2d reduces over (channels, taps), which the CPU
product reads faster; the CUDA backend reorders its reduction to this form when it renders
the product (`_reduction_for_runs`), so the tests run both."""
from compiler import conv


def taps_channels_conv2d(x, w, stride=1, padding=0, dilation=1):
    n, c = x.shape[:2]
    o, _, kh, kw = w.shape
    pads = padding if isinstance(padding, tuple) else (padding, padding)
    xp = x.pad([(0, 0), (0, 0), (pads[0], pads[0]), (pads[1], pads[1])])
    stride = stride if isinstance(stride, tuple) else (stride, stride)
    dilation = dilation if isinstance(dilation, tuple) else (dilation, dilation)
    win = xp.windows((kh, kw), stride, dilation)                      # (n, c, ho, wo, kh, kw)
    ho, wo = win.shape[2:4]
    cols = win.permute(0, 4, 5, 1, 2, 3).reshape(n, kh * kw * c, ho * wo)
    wm = w.permute(0, 2, 3, 1).contiguous().reshape(o, kh * kw * c)
    return (wm @ cols).contiguous().reshape(n, o, ho, wo)


def frontend_conv2d(x, w, stride=1, padding=0, dilation=1):
    return conv.conv2d(x, w, stride=stride, padding=padding, dilation=dilation)
