"""rococo_eval.models.nets: the networks at module level, configured in ``__init__`` (their outputs are compared with
the official code's in test_vse_infty.py and test_pcmepp.py)."""

import pytest

torch = pytest.importorskip("torch")

from rococo_eval.models.nets.resnet import ResNet  # noqa: E402
from rococo_eval.models.nets.vse_infty import EncoderImageAggr  # noqa: E402
from rococo_eval.models.resnet import ResnetShape, resnet_shape  # noqa: E402


def test_the_caffe_layout_has_no_grouped_convolutions():
    with pytest.raises(ValueError, match="the caffe layout .* has no grouped convolutions"):
        ResNet(ResnetShape("caffe", (1, 1, 1, 1), groups=4, width_per_group=4))
    net = ResNet(ResnetShape("caffe", (1, 2, 1, 1), num_classes=10))
    assert resnet_shape(net.state_dict(), "caffe") == ResnetShape("caffe", (1, 2, 1, 1), 1, 64, 10)
    assert net.maxpool.ceil_mode and net.layer1[0].conv1.stride == (1, 1) and net.layer2[0].conv1.stride == (2, 2)


def test_two_encoders_of_one_class_keep_their_own_configuration():
    """The region encoder has the MLP beside its linear layer, the grid's pooling does not; each normalises as its
    options say."""
    torch.manual_seed(0)
    regions, grid = EncoderImageAggr(6, 4, True, False), EncoderImageAggr(6, 4, False, True)
    assert {key.split(".")[0] for key in regions.state_dict()} == {"fc", "mlp", "gpool"}
    assert {key.split(".")[0] for key in grid.state_dict()} == {"fc", "gpool"}
    features, lengths = torch.randn(2, 3, 6), torch.tensor([3, 2])
    regions.eval(), grid.eval()
    assert torch.allclose(regions(features, lengths).norm(dim=-1), torch.ones(2))
    assert not torch.allclose(grid(features, lengths).norm(dim=-1), torch.ones(2))
