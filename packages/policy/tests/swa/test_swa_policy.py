"""What only the SWA policy has: launches per ``has_image``, the calls a deployment makes,
and the deployment that covers a key. The properties every kernel shares are in
``tests/test_registry.py``."""

from __future__ import annotations

import pytest
from dsv4_policy.kernels import c128a, swa
from dsv4_policy.kernels.swa import Entry, Key, Range, Tile


def table() -> swa.Table:
    return swa.make_table([
        Entry("text", {"arch": "sm90", "window_size": 128, "has_image": 0,
                       "num_tokens": Range(1, 64)}, Tile(2, 128, 2)),
        Entry("image", {"arch": "sm90", "index_width": Range(129), "has_image": 1},
              Tile(4, 256, 4)),
    ])


def test_the_baseline_is_one_launch_per_has_image() -> None:
    plain, image = (swa.baseline(Key("sm80", 128, 128, 64, h, 7)) for h in (0, 1))
    assert (plain.has_image, image.has_image) == (False, True)
    assert plain.compile_key() == (1, 1024, 4, 0) and image.compile_key() == (1, 1024, 4, 1)
    assert plain.source == image.source == "baseline"


def test_a_hit_keeps_the_calls_has_image() -> None:
    launch = swa.resolve(Key("sm90", 128, 192, 64, 1, 3), table())
    assert (launch.source, launch.compile_key()) == ("table:image", (4, 256, 4, 1))
    assert swa.resolve(Key("sm90", 128, 128, 64, 0, 3), table()).source == "table:text"
    assert swa.resolve(Key("sm90", 128, 128, 64, 0, 65), table()).source == "baseline"


def test_deployment_calls_add_the_widened_prefill_rows_for_images() -> None:
    assert swa.deployment_calls(128) == ((128, 0),)
    assert swa.deployment_calls(128, 64) == ((128, 0), (192, 0), (192, 1))
    with pytest.raises(ValueError, match="window_size must be an integer >= 1"):
        swa.deployment_calls(0)
    with pytest.raises(ValueError, match="max_image_tokens must be an integer >= 0"):
        swa.deployment_calls(128, -1)


def test_compile_keys_follow_the_deployments_calls() -> None:
    text = swa.compile_key_sources(table(), "sm90", window_size=128, block_size=64)
    assert text == {(1, 1024, 4, 0): ("baseline",), (2, 128, 2, 0): ("table:text",)}
    vision = swa.compile_keys(table(), "sm90", window_size=128, block_size=64,
                              max_image_tokens=64)
    assert vision == {(1, 1024, 4, 0), (1, 1024, 4, 1), (2, 128, 2, 0), (4, 256, 4, 1)}
    assert swa.compile_keys(table(), "sm86", window_size=128, block_size=64) == {
        (1, 1024, 4, 0)}
    with pytest.raises(ValueError, match="block_size must be an integer >= 1"):
        swa.compile_keys(table(), "sm90", window_size=128, block_size=0)


def test_deployment_of_covers_a_key_or_says_none_makes_it() -> None:
    assert swa.deployment_of(Key("sm90", 128, 192, 64, 1, 3)) == {
        "window_size": 128, "block_size": 64, "max_image_tokens": 64}
    assert swa.deployment_of(Key("sm90", 128, 128, 64, 0, 3))["max_image_tokens"] == 0
    assert swa.deployment_of(Key("sm90", 128, 128, 64, 1, 3)) is None
    assert swa.deployment_of(Key("sm90", 128, 100, 64, 0, 3)) is None


def test_resolve_refuses_another_kernels_table() -> None:
    with pytest.raises(TypeError, match="expected an SWA launch table"):
        swa.resolve(Key("sm90", 128, 128, 64, 0, 1), c128a.shipped_table())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected a C128A launch table"):
        c128a.resolve(c128a.Key("sm90", 128, 4096, 1, 1, 0, 2),
                      swa.shipped_table())  # type: ignore[arg-type]


def test_an_swa_entry_sets_only_its_tile() -> None:
    text = swa.render_table([Entry("a", {"arch": "sm90"}, Tile(1, 128, 2))]).replace(
        "num_warps = 2", "num_warps = 2\nrow_stride = 128")
    with pytest.raises(swa.TableError, match=r"unknown field 'row_stride'.*sets only its tile"):
        swa.loads_table(text)
    with pytest.raises(ValueError, match=r"cols_per_program must be a power of two in 16\.\.8192"):
        Tile(1, 8, 2)
