"""Fixtures shared by the model tests."""

import pytest


@pytest.fixture(scope="module", params=["bart", "t5"])
def preset(request, tmp_path_factory):
    """(a small random backbone, the path of the keras-hub preset folder it
    was saved to): BART and T5 (`test_backbone_summarizer.small_backbone`)."""
    from test_backbone_summarizer import small_backbone

    backbone = small_backbone(request.param)
    path = str(tmp_path_factory.mktemp(f"{request.param}_preset"))
    backbone.save_to_preset(path)
    return backbone, path
