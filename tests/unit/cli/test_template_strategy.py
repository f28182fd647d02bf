"""``kubectl gpu template`` leaves the strategy to the manager unless asked: a
template that wrote ``schedulingStrategy: leastLoaded`` would override the
manager's --default-strategy for every workload made from it."""

from __future__ import annotations

import yaml

from internal.cli.main import main


def template(capsys, *args: str) -> dict:  # type: ignore[no-untyped-def]
    assert main(["template", *args]) == 0
    return yaml.safe_load(capsys.readouterr().out)


def test_no_strategy_unless_one_is_asked_for(capsys) -> None:  # type: ignore[no-untyped-def]
    assert "schedulingStrategy" not in template(capsys)["spec"]
    assert template(capsys, "--strategy", "bestFit")["spec"]["schedulingStrategy"] == "bestFit"
