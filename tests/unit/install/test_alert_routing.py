"""The AlertmanagerConfig sample (config/samples/monitoring) routes every alert of
config/prometheus/rules.yaml to its Slack receiver, the critical ones on a faster
repeat, and reads the webhook URL from a Secret: never a URL in the manifest."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "config" / "samples" / "monitoring" / "alertmanagerconfig-slack.yaml"


def alerts() -> dict[str, dict]:
    doc = yaml.safe_load((ROOT / "config" / "prometheus" / "rules.yaml").read_text())
    return {r["alert"]: r.get("labels", {}) for g in doc["groups"] for r in g["rules"]
            if "alert" in r}


def matches(matchers: list[dict], labels: dict[str, str]) -> bool:
    """Alertmanager's matchers: regular expressions are anchored at both ends."""
    for m in matchers:
        value = labels.get(m["name"], "")
        op = m.get("matchType", "=")
        ok = {"=": value == m["value"], "!=": value != m["value"],
              "=~": re.fullmatch(m["value"], value) is not None,
              "!~": re.fullmatch(m["value"], value) is None}[op]
        if not ok:
            return False
    return True


def route_of(route: dict, labels: dict[str, str]) -> dict | None:
    """The deepest route that takes the alert (first matching child, as Alertmanager
    does without `continue`), or None when the top route does not match."""
    if not matches(route.get("matchers", []), labels):
        return None
    for child in route.get("routes", []):
        got = route_of(child, labels)
        if got is not None:
            return got
    return route


def test_every_alert_reaches_slack() -> None:
    spec = yaml.safe_load(SAMPLE.read_text())["spec"]
    receivers = {r["name"]: r for r in spec["receivers"]}
    rules = alerts()
    assert len(rules) >= 8
    for name, labels in rules.items():
        route = route_of(spec["route"], {"alertname": name, **labels})
        assert route is not None, f"{name} is not routed: add it to the alertname matcher"
        receiver = route.get("receiver", spec["route"]["receiver"])
        assert receivers[receiver]["slackConfigs"], name
        repeat = route.get("repeatInterval", spec["route"]["repeatInterval"])
        assert repeat == ("1h" if labels["severity"] == "critical" else "4h"), name


def test_an_alert_of_someone_else_is_not_routed() -> None:
    spec = yaml.safe_load(SAMPLE.read_text())["spec"]
    assert route_of(spec["route"], {"alertname": "KubePodCrashLooping",
                                    "severity": "critical"}) is None
    # Anchored: a longer name that starts like ours is someone else's.
    assert route_of(spec["route"], {"alertname": "GPUOrchestratorDownstream"}) is None


def test_the_webhook_url_comes_from_a_secret() -> None:
    text = SAMPLE.read_text()
    spec = yaml.safe_load(text)["spec"]
    for receiver in spec["receivers"]:
        for slack in receiver["slackConfigs"]:
            assert set(slack["apiURL"]) == {"name", "key"}, slack["apiURL"]
    body = text.split("\napiVersion:", 1)[1]  # below the header's instructions
    assert "hooks.slack.com" not in body and "https://" not in body
