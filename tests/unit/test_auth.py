"""Pieces of the security model that need no store: the submit rate limiter, which
binds count as loopback when authentication is off, scopes, and ZooKeeper digest ACLs."""

from __future__ import annotations

import pytest

from jobserver.api import error_reply
from jobserver.api.auth import Principal, endpoint_scopes, required_scope
from jobserver.api.limits import SubmitLimiter
from jobserver.config import load_config
from jobserver.exceptions import ConfigError, RateLimited
from jobserver.security import check_serve_auth, is_loopback
from jobserver.store.tokens import ALL_SCOPES, parse_scopes


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_token_bucket_allows_a_burst_then_the_rate() -> None:
    clock = Clock()
    limiter = SubmitLimiter(rate=2.0, burst=3, clock=clock)
    assert [limiter.wait_time("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.wait_time("a") == pytest.approx(0.5)
    assert limiter.wait_time("b") == 0.0  # every caller has a bucket of its own
    clock.now += 0.5
    assert limiter.wait_time("a") == 0.0
    assert limiter.wait_time("a") == pytest.approx(0.5)
    clock.now += 60  # refills to the burst, no further
    assert [limiter.wait_time("a") for _ in range(4)][-1] == pytest.approx(0.5)


def test_rate_limited_says_when_in_whole_seconds() -> None:
    limiter = SubmitLimiter(rate=0.25, burst=1, clock=Clock())
    caller = Principal("ci", frozenset({"submit"}), id=7)
    limiter.check(caller)
    with pytest.raises(RateLimited) as limited:
        limiter.check(caller)
    reply = error_reply(limited.value)
    assert reply is not None and reply.status == 429 and reply.headers == {"Retry-After": "4"}
    assert limited.value.details == {"token": "ci", "token_id": 7, "retry_after": 4}
    fast = SubmitLimiter(rate=1000.0, burst=1, clock=Clock())
    fast.check(caller)
    with pytest.raises(RateLimited) as limited:
        fast.check(caller)
    assert limited.value.retry_after == 1  # never 0


def test_a_batch_takes_one_submit_per_job_all_or_none() -> None:
    clock = Clock()
    limiter = SubmitLimiter(rate=2.0, burst=10, clock=clock)
    assert limiter.wait_time("a", 6) == 0.0
    assert limiter.wait_time("a", 5) == pytest.approx(0.5)  # 4 left: none taken
    assert limiter.wait_time("a", 4) == 0.0
    assert limiter.wait_time("a", 1) == pytest.approx(0.5)
    clock.now += 60
    caller = Principal("bulk", frozenset({"submit"}), id=3)
    with pytest.raises(RateLimited) as limited:  # more than the burst: never passes
        limiter.check(caller, 11)
    assert "exceeds api.submit_burst (10)" in limited.value.message
    assert limited.value.details["burst"] == 10 and limited.value.details["requested"] == 11
    limiter.check(caller, 10)  # the full bucket was left alone


@pytest.mark.parametrize("bind,loopback", [
    ("127.0.0.1:8080", True), ("127.8.9.10:80", True), ("localhost:8080", True),
    ("[::1]:8080", True), ("unix:/run/jobserver.sock", True),
    ("0.0.0.0:8080", False), ("10.0.0.5:8080", False), ("192.168.1.2:8080", False),
    ("myhost:8080", False), ("[::]:8080", False), ("localhost.evil.example:8080", False)])
def test_loopback_binds(bind: str, loopback: bool) -> None:
    assert is_loopback(bind) is loopback


@pytest.mark.parametrize("bind", ["0.0.0.0:8080", "10.1.2.3:9000", "jobs.internal:8080"])
def test_auth_off_refuses_a_reachable_bind(bind: str) -> None:
    config = load_config(environ={"JOBSERVER_API__AUTH": "false", "JOBSERVER_API__BIND": bind})
    with pytest.raises(ConfigError) as refused:
        check_serve_auth(config, count_stored_tokens=lambda _: 0)
    assert refused.value.message.startswith("api.auth:") and bind in refused.value.message


def test_auth_off_refuses_a_public_node_bind_too() -> None:
    config = load_config(environ={"JOBSERVER_API__AUTH": "false",
                                  "JOBSERVER_API__NODE_BIND": "0.0.0.0:8081"})
    with pytest.raises(ConfigError) as refused:
        check_serve_auth(config, count_stored_tokens=lambda _: 0)
    assert "0.0.0.0:8081" in refused.value.message
    loopback = load_config(environ={"JOBSERVER_API__AUTH": "false",
                                    "JOBSERVER_API__NODE_BIND": "127.0.0.1:8081"})
    check_serve_auth(loopback, count_stored_tokens=lambda _: pytest.fail("not asked"))


def test_auth_off_on_loopback_needs_no_token() -> None:
    config = load_config(environ={"JOBSERVER_API__AUTH": "false"})
    check_serve_auth(config, count_stored_tokens=lambda _: pytest.fail("not asked"))


def test_auth_on_needs_some_token() -> None:
    config = load_config(environ={})
    with pytest.raises(ConfigError, match="jobserver token create"):
        check_serve_auth(config, count_stored_tokens=lambda _: 0)
    check_serve_auth(config, count_stored_tokens=lambda _: 1)


def test_scopes() -> None:
    assert parse_scopes("submit, read,read") == ["read", "submit"]
    assert parse_scopes(["admin", "shell", "operate"]) == ["shell", "operate", "admin"]
    for bad in ("", "root", "read,all"):
        with pytest.raises(ValueError):
            parse_scopes(bad)
    # Unknown routes need admin: a new route is closed until it is given a scope.
    assert required_scope("cluster.drain_node") == "admin"
    assert required_scope(None) is None
    assert set(endpoint_scopes().values()) <= ALL_SCOPES


def test_zookeeper_auth_is_validated_and_secret() -> None:
    from locks.zookeeper import digest_acl_options

    config = load_config(environ={"JOBSERVER_ZOOKEEPER__AUTH": "digest:js:pa:ss"})
    assert "pa:ss" not in repr(config) and "pa:ss" not in str(config.model_dump())
    options = digest_acl_options(config.zookeeper.auth.get_secret_value())
    assert options["auth_data"] == [("digest", "js:pa:ss")]
    [acl] = options["default_acl"]
    assert acl.id.scheme == "digest" and acl.id.id.startswith("js:") and acl.perms == 31
    assert digest_acl_options(None) == {}
    for bad in ("js:pass", "digest:js", "sasl:js:pass", "digest::pass"):
        with pytest.raises(ConfigError, match="zookeeper.auth"):
            load_config(environ={"JOBSERVER_ZOOKEEPER__AUTH": bad})
