"""Policy parameters: defaults, command-line text and config files, with one clear line
per mistake; and the `elasticd policies` listing."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from elasticd.policies import POLICIES, PolicyParamError, make_policy, render_policies
from elasticd.policies.config import build_policy, policy_params, read_policy_config
from elasticd.policies.params import parse_assignments

SEED_DEFAULTS = {
    "mebf-basic-handoff": {"theta": 0.5, "gamma": 2.0, "share_factor": 0.4, "spare_ratio": 0.5},
    "sd": {"max_slowdown": 10.0, "dynamic_max_slowdown": False, "sharing_factor": 0.5, "max_mates": 2},
    "fit": {"expand_limit": 1.0, "compact": False},
    "malleable": {"min_resize_interval": 10.0},
}


@pytest.mark.parametrize(("name", "defaults"), SEED_DEFAULTS.items())
def test_every_parameter_has_the_seeds_default(name: str, defaults: dict[str, object]) -> None:
    policy = make_policy(name)
    for key, value in defaults.items():
        attr = "expand_limit" if key == "expand_limit" else key
        assert getattr(policy, attr) == value, key


def test_values_from_text_and_from_typed_files_mean_the_same() -> None:
    a = make_policy("sd", {"max_slowdown": "inf", "dynamic-max-slowdown": "yes", "max_mates": "1"})
    b = make_policy("sd", {"max_slowdown": math.inf, "dynamic_max_slowdown": True, "max_mates": 1})
    # Parameters only: private memo state (a policy's cached predictions) is per instance.
    assert params_of(a) == params_of(b)
    assert (a.max_slowdown, a.dynamic_max_slowdown, a.max_mates) == (math.inf, True, 1)  # type: ignore[attr-defined]


def test_every_mistake_is_named_at_once() -> None:
    with pytest.raises(PolicyParamError) as exc:
        make_policy("mebf-basic-spare", {"theta": "half", "gamma": 0.5, "shre_factor": 0.3, "min_resize_interval": "inf"})
    assert exc.value.problems == [
        "policy mebf-basic-spare: theta: must be a number, not 'half'",
        "policy mebf-basic-spare: gamma: must be at least 1.0, not 0.5",
        ("policy mebf-basic-spare: unknown parameter 'shre_factor' (its parameters: theta, gamma, share_factor, "
        "spare_ratio, min_resize_interval)"),
        "policy mebf-basic-spare: min_resize_interval: must be a finite number, not 'inf'",
    ]
    with pytest.raises(PolicyParamError, match="compact: must be true or false, not 'maybe'"):
        make_policy("fit", {"compact": "maybe"})
    with pytest.raises(PolicyParamError, match="max_mates: must be an integer, not True"):
        make_policy("sd", {"max_mates": True})
    with pytest.raises(PolicyParamError, match=r"policy easy: unknown parameter 'theta' \(its parameters: none\)"):
        make_policy("easy", {"theta": 1})


def test_unknown_policy_names_list_the_known_ones_default_first() -> None:
    with pytest.raises(ValueError, match="unknown policy 'sjf'; known policies: easy, fcfs, backfill, conservative"):
        make_policy("sjf")


def test_the_older_resize_interval_flag_applies_where_it_exists_and_loses_to_an_explicit_parameter() -> None:
    assert make_policy("avg", min_resize_interval=3.0).min_resize_interval == 3.0  # type: ignore[attr-defined]
    assert make_policy("easy", min_resize_interval=3.0).name == "easy"
    p = make_policy("avg", {"min_resize_interval": 1}, min_resize_interval=3.0)
    assert p.min_resize_interval == 1.0  # type: ignore[attr-defined]


def test_assignments_need_an_equals_sign() -> None:
    assert parse_assignments(["theta=0.6", "Share-Factor = 0.3"]) == {"theta": "0.6", "share_factor": "0.3"}
    with pytest.raises(PolicyParamError, match="--policy-param 'theta': expected KEY=VALUE"):
        parse_assignments(["theta"])


# ---- config files ------------------------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "elastic.toml"
    p.write_text(text)
    return p


def test_family_table_then_policy_table_then_command_line(tmp_path: Path) -> None:
    cfg = write(tmp_path, """
[policy.mebf]
theta = 0.6
gamma = 3
[policy.mebf-basic-spare]
gamma = 2.5
spare_ratio = 0.25
[policy.sd]
max_slowdown = inf
""")
    assert read_policy_config(cfg, "mebf-basic-spare") == {"theta": 0.6, "gamma": 2.5, "spare_ratio": 0.25}
    assert read_policy_config(cfg, "mebf-basic-handoff") == {"theta": 0.6, "gamma": 3}
    assert read_policy_config(cfg, "sd") == {"max_slowdown": math.inf}
    p = build_policy("MEBF-basic-Spare", cfg, ["theta=0.7"])
    assert (p.theta, p.gamma, p.spare_ratio) == (0.7, 2.5, 0.25)  # type: ignore[attr-defined]
    values = policy_params("mebf-basic-spare", cfg)
    assert values["share_factor"] == 0.4 and values["gamma"] == 2.5


def test_a_config_file_with_mistakes_names_the_file_table_and_parameter(tmp_path: Path) -> None:
    cfg = write(tmp_path, """
[policy.sd]
max_slowdown = "lots"
[policy.mebf-basic-sparse]
theta = 0.5
[scheduler]
x = 1
""")
    with pytest.raises(PolicyParamError) as exc:
        read_policy_config(cfg, "easy")
    problems = exc.value.problems
    assert problems[0] == f"{cfg}: unknown table(s) scheduler; policy settings go in [policy.NAME]"
    assert problems[1] == f"{cfg}: policy sd: max_slowdown: must be a number or inf, not 'lots'"
    assert problems[2].startswith(f"{cfg}: [policy.mebf-basic-sparse]: no such policy or family (known: easy, fcfs")


def test_a_config_file_that_is_not_toml_or_not_there_is_named(tmp_path: Path) -> None:
    with pytest.raises(PolicyParamError, match=r"not valid TOML: .*line 2"):
        read_policy_config(write(tmp_path, "[policy.sd]\nmax_slowdown = = 3\n"), "sd")
    with pytest.raises(PolicyParamError, match="cannot read policy config"):
        read_policy_config(tmp_path / "missing.toml", "sd")


# ---- the listing -------------------------------------------------------------------------


def test_the_listing_has_one_line_per_policy_and_every_parameter_with_its_default() -> None:
    text = render_policies()
    lines = text.splitlines()
    for name, e in POLICIES.items():
        assert sum(1 for line in lines if line.split()[:1] == [name]) == 1, name
        for p in e.params:
            assert any(line.strip().startswith(p.describe()) for line in lines), p.name
    assert "theta=0.5" in text and "max_slowdown=10.0" in text and "expand_limit=1.0" in text
    assert len(POLICIES) == 21


def params_of(policy: object) -> dict[str, object]:
    return {k: v for k, v in vars(policy).items() if not k.startswith("_")}
