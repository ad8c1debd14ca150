"""Host names as istiod treats them (pkg/config/host name.go / names.go, pilot/pkg/model config.go).

Expectations are checked against istio/istio: ``Name.Matches`` / ``Name.SubsetOf`` (name.go and its
doc-comment examples), ``Names.Less`` (names.go), ``MostSpecificHostMatch`` (config.go),
``ResolveShortnameToFQDN`` (config.go) and ``ValidateWildcardDomain`` / ``IsWildcardDNS1123Label``
(pkg/config/validation/agent).
"""

from __future__ import annotations

import pytest

from app.config.host import (
    is_wildcard,
    matches,
    more_specific,
    most_specific_match,
    resolve_short_name,
    specificity_key,
    subset_of,
    validate_fqdn,
    validate_wildcard_host,
)

# --- Matches: overlap in either direction ------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [
        # the examples in istio's Name.Matches doc comment
        ("foo.com", "foo.com", True),
        ("foo.com", "bar.com", False),
        ("*.com", "foo.com", True),
        ("bar.com", "*.com", True),
        ("*.foo.com", "foo.com", False),
        ("*", "foo.com", True),
        ("*", "*.com", True),
        # two wildcards overlap when the longer one ends with the shorter one's suffix, both ways
        ("*.com", "*.foo.com", True),
        ("*.foo.com", "*.com", True),
        ("*.foo.com", "*.bar.com", False),
        ("*.bar.foo.com", "*.foo.com", True),
        ("*", "*", True),
        # the suffix is compared as a string: "xfoo.com" does not end with ".foo.com"
        ("xfoo.com", "*.foo.com", False),
        ("a.foo.com", "*.foo.com", True),
        # exact names are compared exactly (no case folding, no trailing-dot normalisation)
        ("foo.com", "foo.com.", False),
    ],
)
def test_matches(a: str, b: str, want: bool) -> None:
    assert matches(a, b) is want
    assert matches(b, a) is want  # symmetric


# --- SubsetOf: one direction only ------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [
        ("foo.com", "foo.com", True),
        ("foo.com", "*.com", True),
        ("*.com", "foo.com", False),
        ("*.foo.com", "*.com", True),
        ("*.com", "*.foo.com", False),
        ("*.foo.com", "*.foo.com", True),
        ("*.com", "*", True),
        ("*", "*.com", False),
        ("foo.com", "*", True),
        ("*", "*", True),
        ("foo.com", "*.foo.com", False),
        ("a.b.foo.com", "*.foo.com", True),
        ("foo.com", "bar.com", False),
    ],
)
def test_subset_of(a: str, b: str, want: bool) -> None:
    assert subset_of(a, b) is want


def test_is_wildcard() -> None:
    assert is_wildcard("*")
    assert is_wildcard("*.foo.com")
    assert not is_wildcard("foo.*.com")
    assert not is_wildcard("")


# --- specificity order (host.Names.Less) ----------------------------------------------------


def test_sort_hosts_exact_first_then_longest_then_alphabetical_wildcards_last() -> None:
    hosts = ["*", "b.com", "*.com", "foo.bar.com", "*.bar.com", "a.com", "*.a.com", "zz.com"]
    assert sorted(hosts, key=specificity_key) == [
        "foo.bar.com",  # exact hosts, longest first
        "zz.com",
        "a.com",  # same length: alphabetical
        "b.com",
        "*.bar.com",  # then wildcards, longest first
        "*.a.com",
        "*.com",
        "*",
    ]


def test_more_specific() -> None:
    assert more_specific("a.com", "*.com")  # any exact host beats a wildcard, even a longer one
    assert more_specific("a.com", "*.very.long.example.com")
    assert more_specific("*.bar.com", "*.com")
    assert more_specific("*.com", "*")
    assert not more_specific("*", "*.com")
    assert more_specific("a.com", "b.com")  # same length: alphabetical
    assert not more_specific("b.com", "a.com")
    assert not more_specific("a.com", "a.com")


# --- MostSpecificHostMatch ------------------------------------------------------------


WILDCARDS = {
    "*": "any",
    "*.cluster.local": "cluster",
    "*.svc.cluster.local": "svc",
    "*.bar.svc.cluster.local": "bar",
}


def test_most_specific_match_exact_host_beats_any_wildcard() -> None:
    specific = {"foo.bar.svc.cluster.local": "exact"}
    assert most_specific_match("foo.bar.svc.cluster.local", specific, WILDCARDS) == (
        "foo.bar.svc.cluster.local",
        "exact",
    )


def test_most_specific_match_longest_matching_wildcard_wins() -> None:
    assert most_specific_match("foo.bar.svc.cluster.local", {}, WILDCARDS) == ("*.bar.svc.cluster.local", "bar")
    assert most_specific_match("foo.baz.svc.cluster.local", {}, WILDCARDS) == ("*.svc.cluster.local", "svc")
    assert most_specific_match("foo.cluster.local", {}, WILDCARDS) == ("*.cluster.local", "cluster")


def test_most_specific_match_star_is_last_resort() -> None:
    assert most_specific_match("api.example.com", {"other.example.com": "x"}, WILDCARDS) == ("*", "any")


def test_most_specific_match_none_when_nothing_matches() -> None:
    wildcards = {"*.bar.com": 1}
    assert most_specific_match("bar.com", {"foo.bar.com": 2}, wildcards) is None  # *.bar.com needs a label
    assert most_specific_match("xbar.com", {}, wildcards) is None


def test_most_specific_match_wildcard_needle() -> None:
    # a wildcard needle (a ServiceEntry host) is looked up in the wildcard rules only:
    # first by its exact name, then by suffix
    wildcards = {"*.example.com": "a", "*.com": "b", "*": "c"}
    assert most_specific_match("*.example.com", {"*.example.com": "never"}, wildcards) == ("*.example.com", "a")
    assert most_specific_match("*.api.example.com", {}, wildcards) == ("*.example.com", "a")
    # a specific rule never matches a wildcard needle, even one it falls under
    assert most_specific_match("*.example.org", {"api.example.org": "x"}, {}) is None
    # "*.com" does not fall under "*.example.com"
    assert most_specific_match("*.com", {}, {"*.example.com": "a"}) is None


# --- ResolveShortnameToFQDN -------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "want"),
    [
        ("reviews", "reviews.bookinfo.svc.cluster.local"),
        ("reviews.bookinfo", "reviews.bookinfo"),  # anything with a dot is left alone
        ("reviews.bookinfo.svc.cluster.local", "reviews.bookinfo.svc.cluster.local"),
        ("*", "*"),
        ("*.bookinfo.svc.cluster.local", "*.bookinfo.svc.cluster.local"),
        ("10.0.0.1", "10.0.0.1"),
    ],
)
def test_resolve_short_name(host: str, want: str) -> None:
    assert resolve_short_name(host, "bookinfo") == want


def test_resolve_short_name_uses_the_domain_suffix() -> None:
    assert resolve_short_name("reviews", "bookinfo", "corp.example") == "reviews.bookinfo.svc.corp.example"


def test_resolve_short_name_leaves_ipv6_addresses_alone() -> None:
    assert resolve_short_name("2001:db8::1", "bookinfo") == "2001:db8::1"


# --- ValidateWildcardDomain -----------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    [
        "*",
        "*.example.com",
        "reviews",
        "reviews.bookinfo.svc.cluster.local",
        "istio.io.",  # a trailing dot (empty last label) is allowed
        "a-b.c-d.com",
        "x" * 63 + ".com",
    ],
)
def test_validate_wildcard_host_accepts(host: str) -> None:
    assert validate_wildcard_host(host) is None


@pytest.mark.parametrize(
    "host",
    [
        "",
        "foo.*.com",  # a wildcard only in the first label
        "*.*.com",
        "bad_host.com",
        "-foo.com",
        "foo-.com",
        "foo..com",
        "x" * 64 + ".com",  # label longer than 63
        ("a" * 50 + ".") * 5 + "com",  # longer than 255 in total
    ],
)
def test_validate_wildcard_host_rejects(host: str) -> None:
    reason = validate_wildcard_host(host)
    assert isinstance(reason, str)
    assert reason


def test_validate_wildcard_host_accepts_asterisk_prefixed_first_label() -> None:
    assert validate_wildcard_host("*-foo.example.com") is None
    assert validate_wildcard_host("*foo.example.com") is None


def test_validate_wildcard_host_rejects_numeric_top_level_domain() -> None:
    assert validate_wildcard_host("foo.123") is not None
    assert validate_wildcard_host("*.foo.123") is not None


def test_validate_fqdn() -> None:
    assert validate_fqdn("api.example.com") is None
    assert validate_fqdn("*.example.com") is not None  # an FQDN has no wildcard
    assert validate_fqdn("") == "must not be empty"
