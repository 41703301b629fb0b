"""Calibration signals and the rules of thumb, from transition records."""

from __future__ import annotations

import json

from toolbreaker import Policy
from toolbreaker._tuning._signals import (
    calibrate,
    compliance,
    covered_by,
    findings,
    is_client_error,
    opens_rate,
)
from toolbreaker.cli import main
from toolbreaker.core._breaker.receipt import Replay
from toolbreaker.core._breaker.state import Event

POLICY = Policy(failure_threshold=1, cooldown_ms=1_000, cooldown_max_ms=1_000)


def drive(script: list[tuple[int, str]], dep: str = "search", policy: Policy = POLICY):
    """Feed ``(at, type)`` pairs; each outcome settles the call requested just before."""
    driver = Replay(policy)
    records = []
    for n, (at, kind) in enumerate(script):
        call = f"c{n}" if kind == "request" else f"c{n - 1}"
        records.extend(driver.feed(Event(kind, at, dep, call)))
    return records


def test_time_open_opens_per_hour_and_share():
    """One failure opens for a second of a ten-second span: 10 % open, 360 opens/h."""
    records = drive([(0, "request"), (0, "failure"), (1_000, "request"), (1_000, "success")])
    signals = calibrate(records, until=10_000)["search"]
    assert signals.opens == 1
    assert signals.time_open_ms == 1_000
    assert signals.open_share == 0.1
    assert signals.opens_per_hour == 360.0


def test_open_at_the_end_counts_until_the_end():
    """A breaker still open when the observation ends is open until then."""
    records = drive([(0, "request"), (0, "failure")])
    assert calibrate(records, until=4_000)["search"].time_open_ms == 4_000


def test_flapping_is_a_finding():
    """Every probe failing gives a reopen ratio of 100 % and the grow-the-cooldown rule."""
    script = [(0, "request"), (0, "failure")]
    for n in range(1, 4):
        script += [(n * 1_000, "request"), (n * 1_000, "failure")]
    signals = calibrate(drive(script), until=60_000)
    assert signals["search"].half_opens == 3
    assert signals["search"].reopen_ratio == 1.0
    rules = {f.rule for f in findings(signals)}
    assert "flapping" in rules
    assert "mostly-open" in rules


def test_recalls_before_retry_after_are_counted_per_episode():
    """Requests rejected with cooldown are re-calls the model was told not to make."""
    script = [(0, "request"), (0, "failure"), (10, "request"), (20, "request")]
    script += [(1_000, "request"), (1_000, "success")]
    signals = calibrate(drive(script))["search"]
    assert signals.early_recalls == 2
    assert signals.early_recall_episodes == 1
    (finding,) = [f for f in findings({"search": signals}) if f.rule == "model-recalls"]
    assert "2 times" in finding.message
    assert "reword" in finding.advice


def test_client_errors_that_open_the_breaker_are_a_classifier_finding():
    """Opens driven by 404s point at the classifier, with the classes named."""
    records = drive([(0, "request"), (0, "failure"), (5_000, "request"), (5_000, "success")])
    signals = calibrate(records, {"search": {"http-404": 3, "http-503": 1}})
    (finding,) = [f for f in findings(signals) if f.rule == "client-errors"]
    assert "3 of 4" in finding.message
    assert "http-404: 3" in finding.message


def test_a_healthy_breaker_has_no_findings():
    """Closed all along: nothing crosses a threshold."""
    signals = calibrate(drive([(0, "request"), (5, "success")]))
    assert findings(signals) == []


def test_client_error_classes():
    """4xx are client errors except 408 and 429; 5xx and timeouts are not."""
    assert is_client_error("http-404")
    assert not is_client_error("http-429")
    assert not is_client_error("http-408")
    assert not is_client_error("http-503")
    assert not is_client_error("timeout")


def test_advise_on_a_trace(tmp_path, capsys):
    """advise TRACE prints the signals and the findings with their numbers."""
    lines = [
        {"at": 0, "dependency": "search", "type": "request", "call": "a"},
        {"at": 1, "dependency": "search", "type": "failure", "call": "a"},
        {"at": 5, "dependency": "search", "type": "request", "call": "b"},
    ]
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(x) + "\n" for x in lines))
    policy = tmp_path / "p.toml"
    policy.write_text("failure_threshold = 1\ncooldown_ms = 60000\n")
    assert main(["advise", str(trace), "--policy", str(policy)]) == 0
    out = capsys.readouterr().out
    assert "[model-recalls] search" in out
    assert main(["advise", str(trace), "--policy", str(policy), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["signals"][0]["early_recalls"] == 1


def test_advise_needs_one_source(capsys):
    """advise with neither a trace nor a store is a one-line usage error."""
    assert main(["advise"]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_a_short_observation_is_not_mostly_open():
    """Under a minute of records, the share of time open is no finding."""
    signals = calibrate(drive([(0, "request"), (0, "failure")]), until=30_000)
    assert signals["search"].open_share == 1.0
    assert "mostly-open" not in {f.rule for f in findings(signals)}


def test_compliance_is_counted_per_tool_and_wording():
    """Re-calls are grouped by tool and instruction version, episodes counted once."""
    records = drive([(0, "request"), (0, "failure"), (10, "request"), (20, "request")])
    other = drive([(0, "request"), (0, "failure"), (5_000, "request")], dep="orders")
    rows = compliance(
        [("search_tool", "v1", r) for r in records] + [("orders_tool", "v2", r) for r in other]
    )
    by_tool = {(c.tool, c.instructions_version): c for c in rows}
    search = by_tool["search_tool", "v1"]
    assert (search.open_episodes, search.early_recalls, search.episodes_with_recalls) == (1, 2, 1)
    assert search.recall_share == 1.0
    orders = by_tool["orders_tool", "v2"]
    assert orders.early_recalls == 0
    assert orders.to_dict()["recall_share"] == 0.0


def test_advise_replays_a_trace_under_each_rows_policy(tmp_path, capsys):
    """advise TRACE --policy takes the boundary sheet the review commands take: a row with
    a threshold of its own opens its breaker, the defaults keep the others closed."""
    lines = []
    for n, dependency in enumerate(["search", "search", "orders", "orders"]):
        lines += [
            {"at": 10 * n, "dependency": dependency, "type": "request", "call": f"c{n}"},
            {"at": 10 * n + 1, "dependency": dependency, "type": "failure", "call": f"c{n}"},
        ]
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(x) + "\n" for x in lines))
    sheet = tmp_path / "breakers.toml"
    sheet.write_text(
        "[defaults]\ntimeout_ms = 1000\nfailure_threshold = 5\n\n"
        "[search.default]\nfailure_threshold = 1\ncooldown_ms = 60000\n"
    )
    assert main(["advise", str(trace), "--policy", str(sheet), "--json"]) == 0
    opens = {s["key"]: s["opens"] for s in json.loads(capsys.readouterr().out)["signals"]}
    assert opens == {"search": 1, "orders": 0}
    bad = tmp_path / "bad.toml"
    bad.write_text("[search.default]\ntimeout_ms = 1000\nfailure_threshold = 0\n")
    assert main(["advise", str(trace), "--policy", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "bad.toml" in err


def test_openings_are_said_as_counted_over_a_short_span():
    """Under an hour the rate is the count and the span, never an hourly extrapolation;
    from an hour on, the hourly rate too; one opening is singular."""
    assert opens_rate(3, 96_000) == "3 opens in the last 96 s"
    assert opens_rate(1, 1_500) == "1 open in the last 1 s"
    assert opens_rate(0, 0) == "0 opens in the last 0 s"
    assert opens_rate(5, 600_000) == "5 opens in the last 10 min"
    assert opens_rate(4, 3_599_999) == "4 opens in the last 59 min"
    assert opens_rate(4, 3_600_000) == "4 opens in the last 60 min (4.0/h)"
    assert opens_rate(14, 12_600_000) == "14 opens in the last 3.5 h (4.0/h)"


def test_a_short_span_is_not_extrapolated_in_the_mostly_open_finding():
    """The mostly-open finding over 96 s says how many opens in how long, not per hour."""
    script = [(0, "request"), (0, "failure")]
    for n in range(1, 3):
        script += [(n * 1_000, "request"), (n * 1_000, "failure")]
    signals = calibrate(drive(script), until=96_000)
    (finding,) = [f for f in findings(signals) if f.rule == "mostly-open"]
    assert "(3 opens in the last 96 s)" in finding.message
    assert "/h" not in finding.message
    assert signals["search"].to_dict()["opens_rate"] == "3 opens in the last 96 s"


def test_what_the_model_already_has_is_said_once():
    """A fallback, a degradation chain and degraded answers served, in words; nothing: None."""
    assert covered_by() is None
    assert covered_by(None, [], {"omit": 0}) is None
    assert covered_by("search_cache") == "fallback search_cache"
    assert covered_by(degrade=["stale", "omit"]) == "degrade stale > omit"
    assert covered_by(degraded={"omit": 1}) == "1 degraded answer served (omit 1)"
    assert (
        covered_by("cache", ["omit"], {"stale": 2, "omit": 1})
        == "fallback cache; degrade omit; 3 degraded answers served (omit 1, stale 2)"
    )


def test_advice_never_asks_for_a_fallback_the_model_has():
    """Mostly open and re-called: without cover the advice asks for a fallback; with one
    it names what the model has and asks for none."""
    script = [(0, "request"), (0, "failure"), (10, "request")]
    signals = calibrate(drive(script), until=120_000)
    bare = {f.rule: f.advice for f in findings(signals)}
    assert "give the model a fallback" in bare["mostly-open"]
    assert "name a fallback" in bare["model-recalls"]
    covered = {f.rule: f.advice for f in findings(signals, {"search": "fallback search_cache"})}
    assert "fallback" not in covered["mostly-open"].replace("fallback search_cache", "")
    assert "the model already has fallback search_cache" in covered["mostly-open"]
    assert "name a fallback" not in covered["model-recalls"]
    assert "it already has fallback search_cache" in covered["model-recalls"]


def test_advise_on_a_trace_reads_the_sheets_fallback_and_chain(tmp_path, capsys):
    """advise TRACE --policy SHEET: a row with a fallback and one with a degradation chain
    are not told to give the model a fallback; a row with neither is."""
    lines = []
    for n, key in enumerate(["search", "orders:read", "crm"]):
        base = {"dependency": key}  # a trace names a breaker by its key
        lines += [
            {**base, "at": 0, "type": "request", "call": f"a{n}"},
            {**base, "at": 1, "type": "failure", "call": f"a{n}"},
            {**base, "at": 5, "type": "request", "call": f"b{n}"},
            {**base, "at": 90_000, "type": "request", "call": f"c{n}"},
        ]
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(x) + "\n" for x in lines))
    sheet = tmp_path / "breakers.toml"
    sheet.write_text(
        "[defaults]\ntimeout_ms = 1000\nfailure_threshold = 1\ncooldown_ms = 600000\n\n"
        '[tools]\nlocal = ["search_cache"]\n\n'
        '[search.default]\nfallback = "search_cache"\n\n'
        '[orders.read]\ndegrade = ["stale", "omit"]\nmax_stale_ms = 60000\n\n'
        "[crm.default]\n"
    )
    assert main(["advise", str(trace), "--policy", str(sheet), "--json"]) == 0
    advice = {
        (f["key"], f["rule"]): f["advice"] for f in json.loads(capsys.readouterr().out)["findings"]
    }
    assert "the model already has fallback search_cache" in advice["search", "mostly-open"]
    assert "it already has degrade stale > omit" in advice["orders:read", "model-recalls"]
    assert "give the model a fallback" in advice["crm", "mostly-open"]
    for key in ("search", "orders:read"):
        assert "give the model a fallback" not in advice[key, "mostly-open"]
        assert "name a fallback" not in advice[key, "model-recalls"]
    assert main(["advise", str(trace), "--policy", str(sheet)]) == 0
    out = capsys.readouterr().out
    assert "1 open in the last 90 s" in out
    assert "/h" not in out.split("\n\n")[0]  # the table: no hourly rate from 90 s
