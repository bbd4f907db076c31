"""Each support check passes a conforming op and names what it found on a bad one; the
op-list tables in target files are validated with the file and key in the message."""

import pytest

from vpuc.targets import TargetError, load_target
from vpuc.targets.constraints import check_op
from vpuc.targets.ops import OpView

VPU = load_target("vpu")


def conv(
    kernel=3,
    stride=1,
    dilation=1,
    pad=1,
    cin=16,
    cout=32,
    hw=16,
    weights_const=True,
    dtype="float32",
    groups=1,
):
    out_hw = (hw + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    return OpView(
        kind="conv2d",
        name="conv",
        inputs=(((1, cin, hw, hw), dtype), ((cout, cin // groups, kernel, kernel), dtype)),
        output=((1, cout, out_hw, out_hw), dtype),
        constant_inputs=(False, weights_const),
        attrs={
            "kernel": (kernel, kernel), "strides": (stride, stride), "dilation": (dilation, dilation),
            "padding": (pad,) * 4, "groups": groups, "in_channels": cin, "out_channels": cout,
        },
    )  # fmt: skip


def reasons(op, target=VPU):
    return [v.reason for v in check_op(op, target.op_limits(op.kind), target.hardware)]


def test_conforming_conv_passes():
    assert reasons(conv()) == []
    assert reasons(conv(kernel=3, groups=16, cin=16, cout=16)) == []  # depthwise


@pytest.mark.parametrize(
    "op,expected",
    [
        (conv(kernel=9, pad=3), "Kernel height and width must be between 1 and 7 (got 9x9)"),
        (conv(stride=4), "Stride must be between 1 and 3 in both H and W (got 4x4)"),
        (conv(dilation=3, pad=3), "Dilation must be between 1 and 2 in both H and W (got 3x3)"),
        (conv(pad=5, kernel=7), "Padding must be between 0 and 3 on every side (got [5, 5, 5, 5])"),
        (conv(cin=8192, cout=8), "Input and output channels must be between 1 and 4096 (got 8192 in, 8 out)"),
        (conv(weights_const=False), "The weights (second input) must be a constant, not an activation"),
        (
            conv(dtype="float64"),
            "Tensors must be int8, or float32 that the quantiser turns into int8 (got float64)",
        ),
    ],
)
def test_each_violation_is_explained(op, expected):
    assert any(r.startswith(expected) for r in reasons(op)), reasons(op)


def test_clip_and_add_and_mean_checks():
    relu6 = OpView(
        "clip", "c", (((1, 8, 4, 4), "float32"),), ((1, 8, 4, 4), "float32"), attrs={"min": 0.0, "max": 6.0}
    )
    assert reasons(relu6) == []
    odd = OpView(
        "clip", "c", (((1, 8, 4, 4), "float32"),), ((1, 8, 4, 4), "float32"), attrs={"min": -1.0, "max": 1.0}
    )
    assert reasons(odd) == ["Clip must be Relu6-style: constant bounds with min 0 (got [-1, 1])"]
    add = OpView(
        "add", "a", (((1, 8, 4, 4), "float32"), ((1, 8, 1, 1), "float32")), ((1, 8, 4, 4), "float32")
    )
    assert reasons(add) == [
        "Both inputs must have the same shape (no broadcasting) (got [1, 8, 4, 4] and [1, 8, 1, 1])"
    ]
    plus = load_target("vpu-plus")
    mean = OpView(
        "global_avg_pool",
        "m",
        (((1, 8, 4, 4), "float32"),),
        ((1, 8, 1, 1), "float32"),
        attrs={"axes": (2, 3)},
    )
    assert reasons(mean, plus) == []
    last = OpView(
        "global_avg_pool", "m", (((1, 8, 4, 4), "float32"),), ((1, 8, 4, 1), "float32"), attrs={"axes": (-1,)}
    )
    assert reasons(last, plus) == [
        "The mean must be over H and W only (axes 2 and 3 of an NCHW tensor) (got axes [3])"
    ]


BAD_OP_TABLES = [
    ("[ops.lstm]\n", r"ops\.lstm: unknown VPU op kind"),
    ("[ops.conv2d]\nstride = [4, 1]\n", r"ops\.conv2d\.stride: bad range \[4, 1\]"),
    ("[ops.conv2d]\nstride = [1, 2, 3]\n", r"ops\.conv2d\.stride: bad range"),
    ("[ops.conv2d]\nstrides = [1, 2]\n", r"ops\.conv2d\.strides: unknown constraint"),
    ("[ops.clip]\nrelu6_only = 1\n", r"ops\.clip\.relu6_only: must be true or false"),
    ("[ops.sigmoid]\n", r"ops\.sigmoid: needs a 256-entry lookup table but hardware\.lut_entries is 0"),
]


@pytest.mark.parametrize("table,message", BAD_OP_TABLES)
def test_bad_op_tables_name_file_and_key(tmp_path, table, message):
    path = tmp_path / "mine.toml"
    path.write_text('[target]\nname = "mine"\ninherit = "vpu"\n' + table)
    with pytest.raises(TargetError, match=message) as info:
        load_target(path)
    assert "mine.toml" in str(info.value)


def test_child_can_disable_an_inherited_op(tmp_path):
    path = tmp_path / "nocat.toml"
    path.write_text('[target]\nname = "nocat"\ninherit = "vpu"\n[ops.concat]\nenabled = false\n')
    assert not load_target(path).supports("concat") and VPU.supports("concat")


def test_vpu_op_lists_match_the_product_brief():
    assert set(VPU.ops) == {"conv2d", "dense", "relu", "clip", "max_pool2d", "add", "reshape", "concat"}
    plus = load_target("vpu-plus")
    assert set(plus.ops) - set(VPU.ops) == {
        "sigmoid", "tanh", "leaky_relu", "gelu", "silu", "softmax",
        "avg_pool2d", "global_avg_pool", "mul", "matmul",
    }  # fmt: skip
