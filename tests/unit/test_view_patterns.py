"""The view pattern parser: Schedoscope's reference examples (its ``ViewUrlParserTest``
and "View Pattern Reference"), the ranges, enumerations, quoting and decoding, the
errors, which must say where and what, and a round trip of ``ViewAddress.path``."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobserver.exceptions import InvalidRequest
from jobserver.views.patterns import ViewAddress, parse_pattern


def values(pattern: str) -> list[tuple[str | None, ...]]:
    return [address.values for address in parse_pattern(pattern)]


def one(pattern: str) -> tuple[str | None, ...]:
    [address] = parse_pattern(pattern)
    return address.values


def refused(pattern: str, limit: int | None = 1_000_000) -> str:
    with pytest.raises(InvalidRequest) as caught:
        parse_pattern(pattern, limit)
    error = caught.value
    assert error.code == "invalid_request"
    [detail] = error.details
    assert detail["field"] == "pattern"
    assert error.message == f"pattern: {detail['message']}"
    return error.message


def refused_default(pattern: str) -> str:
    """Refused under the limit of the request (``views.max_partitions``)."""
    return refused(pattern, None)


# Schedoscope's examples


@pytest.mark.parametrize("pattern", ["/test.views/Brand", "test.views/Brand",
                                     "test.views/Brand/", "/test.views/Brand/"])
def test_leading_and_trailing_slashes_are_optional(pattern: str) -> None:
    assert parse_pattern(pattern) == [ViewAddress("test.views", "Brand", ())]


def test_parameters_follow_the_view() -> None:
    [address] = parse_pattern("/test.views/Product/EC0106/2014/01/12/")
    assert address == ViewAddress("test.views", "Product", ("EC0106", "2014", "01", "12"))


def test_a_view_enumeration_addresses_each_view_with_the_same_parameters() -> None:
    addresses = parse_pattern("/test.views/e(Product,Brand)/EC0106/2014/01/12/")
    assert [a.name for a in addresses] == ["test.views/Product", "test.views/Brand"]
    assert {a.values for a in addresses} == {("EC0106", "2014", "01", "12")}


def test_the_reference_example_without_a_leading_slash() -> None:
    [address] = parse_pattern("app.eci.datamart/SearchExport/SHOP10/2015/05")
    assert address.name == "app.eci.datamart/SearchExport"
    assert address.values == ("SHOP10", "2015", "05")
    assert address.path == "app.eci.datamart/SearchExport/SHOP10/2015/05"


def test_ym_fills_two_parameters_and_ymd_three() -> None:
    assert one("a/V/ym(201412)") == ("2014", "12")
    assert one("a/V/ymd(20141231)") == ("2014", "12", "31")
    assert one("a/V/EC0106/ymd(20141231)") == ("EC0106", "2014", "12", "31")
    assert one("a/V/EC0106/2014/01/20") == ("EC0106", "2014", "01", "20")


# Ranges


def test_a_monthly_range_lists_each_month_oldest_first_across_a_year_end() -> None:
    assert values("a/V/rym(201312-201402)") == [("2013", "12"), ("2014", "01"), ("2014", "02")]


def test_a_reversed_range_is_swapped() -> None:
    assert values("a/V/rym(201402-201312)") == values("a/V/rym(201312-201402)")
    assert values("a/V/rymd(20140224-20131202)") == values("a/V/rymd(20131202-20140224)")


def test_a_daily_range_lists_each_day_across_a_year_end() -> None:
    days = values("a/V/rymd(20131202-20140224)")
    assert len(days) == 85  # Schedoscope's figure for this range
    assert days[0] == ("2013", "12", "02") and days[-1] == ("2014", "02", "24")
    assert ("2013", "12", "31") in days and ("2014", "01", "01") in days
    assert days == sorted(set(days))


def test_a_daily_range_has_the_leap_day_only_in_a_leap_year() -> None:
    assert values("a/V/rymd(20160228-20160301)") == [
        ("2016", "02", "28"), ("2016", "02", "29"), ("2016", "03", "01")]
    assert values("a/V/rymd(20150228-20150301)") == [("2015", "02", "28"), ("2015", "03", "01")]


def test_a_range_of_one_and_blanks_around_the_dash() -> None:
    assert values("a/V/rym( 201405 - 201405 )") == [("2014", "05")]


# Enumerations


def test_a_string_enumeration_keeps_its_items_as_strings() -> None:
    assert values("a/V/e(1,2,3)") == [("1",), ("2",), ("3",)]


def test_blanks_inside_an_enumeration_item_are_part_of_the_string() -> None:
    assert values("a/V/e(a, b)") == [("a",), (" b",)]


@pytest.mark.parametrize(("pattern", "expected"), [
    ("ei(1,2,3)", [("1",), ("2",), ("3",)]),
    ("el(1,9223372036854775807)", [("1",), ("9223372036854775807",)]),
    ("eb(0,127)", [("0",), ("127",)]),
    ("et(true,false)", [("true",), ("false",)]),
    ("ef(2.5,-1)", [("2.5",), ("-1.0",)]),
    ("ed(0.1,1e3)", [("0.1",), ("1000.0",)]),
    ("eym(201401,201512)", [("2014", "01"), ("2015", "12")]),
    ("eymd(20140101,20160229)", [("2014", "01", "01"), ("2016", "02", "29")]),
    ("erym(201402-201401,201406-201405)",
     [("2014", "01"), ("2014", "02"), ("2014", "05"), ("2014", "06")]),
    ("erymd(20140102-20140101,20141231-20141231)",
     [("2014", "01", "01"), ("2014", "01", "02"), ("2014", "12", "31")]),
])
def test_a_typed_enumeration_types_each_item(pattern: str, expected: list[tuple[str]]) -> None:
    assert values(f"a/V/{pattern}") == expected


def test_a_string_enumeration_may_hold_typed_values() -> None:
    assert values("a/V/e(ym(201401),x,null())") == [("2014", "01"), ("x",), (None,)]


def test_e_of_nothing_is_the_empty_string() -> None:
    assert values("a/V/e()") == [("",)]


# Typed values


def test_null_is_none_and_quoted_null_is_a_string() -> None:
    assert one("a/V/null()") == (None,)
    assert one("a/V/null\\(\\)") == ("null()",)


@pytest.mark.parametrize(("value", "text"), [
    ("i(5)", "5"), ("i(007)", "7"), ("i(2147483647)", "2147483647"),
    ("l(9223372036854775807)", "9223372036854775807"), ("b(127)", "127"),
    ("t(true)", "true"), ("t(false)", "false"),
    ("d(2.1)", "2.1"), ("d(1.5)", "1.5"), ("d(2.10)", "2.1"), ("d(1e3)", "1000.0"),
    ("d(-.5)", "-0.5"), ("f(2.1)", "2.1"), (" i ( 5 ) ", "5"),
])
def test_typed_values_are_kept_as_their_text(value: str, text: str) -> None:
    assert one(f"a/V/{value}") == (text,)


def test_a_cross_product_varies_the_first_segment_slowest() -> None:
    addresses = values("a/V/EC0106/rymd(20140224-20131202)/rym(201402-201312)/ei(9,10)")
    assert len(addresses) == 85 * 3 * 2
    assert addresses[0] == ("EC0106", "2013", "12", "02", "2013", "12", "9")
    assert addresses[1] == ("EC0106", "2013", "12", "02", "2013", "12", "10")
    assert addresses[-1] == ("EC0106", "2014", "02", "24", "2014", "02", "10")
    assert len(set(addresses)) == len(addresses)


def test_views_vary_slowest() -> None:
    addresses = parse_pattern("p/e(A,B)/e(x,y)")
    assert [a.path for a in addresses] == ["p/A/x", "p/A/y", "p/B/x", "p/B/y"]


# Quoting and decoding


@pytest.mark.parametrize(("value", "text"), [
    ("a\\,b", "a,b"), ("\\(x\\)", "(x)"), ("a\\-b", "a-b"), ("a\\\\b", "a\\b"),
    ("a-b,c", "a-b,c"),  # only function arguments give - and , a meaning
    ("a\\b", "a\\b"),  # a backslash before anything else is itself
    ("i\\(5\\)", "i(5)"),
])
def test_backslash_quotes_the_syntax_characters(value: str, text: str) -> None:
    assert one(f"a/V/{value}") == (text,)


def test_quoted_commas_stay_inside_an_enumeration_item() -> None:
    assert values("a/V/e(a\\,b,c\\)d)") == [("a,b",), ("c)d",)]


def test_each_segment_is_url_decoded_before_it_is_parsed() -> None:
    # %2F puts a slash inside a value (the path is split first); + is a space,
    # as Java's URLDecoder has it; %28 %29 are parentheses of the syntax.
    assert one("a/V/x%2Fy/a+b/%C3%A4/i%285%29") == ("x/y", "a b", "\u00e4", "5")
    assert parse_pattern("app%2Eeci/Search%45xport") == [ViewAddress("app.eci", "SearchExport", ())]


# Errors: where and what


@pytest.mark.parametrize("pattern", ["app.demo/Many/a\x00b", "app.demo/Many/a%00b",
                                     "app.demo/Many/e(a,b%0Ac)", "app%09x/Many",
                                     "app.demo/Many/x%C2%85", "app.demo/Many/\x7f"])
def test_a_control_character_typed_or_escaped_is_refused_where_it_stands(
        pattern: str) -> None:
    message = refused(pattern)
    assert "control character U+00" in message
    assert "\x00" not in message and "\n" not in message  # shown escaped, never raw


def test_a_pattern_wider_than_the_configured_limit_names_the_setting() -> None:
    from jobserver.views import limits

    with limits.bound(12):
        message = refused_default("a/V/rym(201401-201412)/e(x,y)")
        assert "24 view partitions, more than the limit of 12 per request " \
               "(views.max_partitions)" in message
        assert len(parse_pattern("a/V/rym(201401-201412)")) == 12


def test_a_pattern_without_a_view_is_refused() -> None:
    message = refused("/test.views/")
    assert "at character 12" in message and "missing view" in message
    assert "/{package}/{view}" in message
    assert "missing view" in refused("")


def test_an_unclosed_parenthesis_is_refused_at_the_segment_end() -> None:
    message = refused("a/V/i(5")
    assert message == ("pattern: at character 8 in segment 'i(5': unbalanced parenthesis: "
                       "expected ')' to close the '(' at character 6")


def test_a_stray_closing_parenthesis_is_refused() -> None:
    message = refused("a/V/x)")
    assert "at character 6 in segment 'x)'" in message and "\\)" in message


def test_text_after_a_function_is_refused() -> None:
    assert "at character 9 in segment 'i(5)x': expected the end" in refused("a/V/i(5)x")


def test_an_impossible_date_is_refused() -> None:
    message = refused("a/V/ymd(20140230)")
    assert "at character 9 in segment 'ymd(20140230)'" in message
    assert "expected a date yyyyMMdd, got '20140230'" in message
    assert "expected a month 01-12, got '13'" in refused("a/V/ym(201413)")


def test_a_malformed_range_is_refused() -> None:
    message = refused("/app/View/rym(201401)")
    assert message == ("pattern: at character 15 in segment 'rym(201401)': "
                       "expected rym(yyyyMM-yyyyMM), got '201401'")
    message = refused("a/V/rymd(20140101-20141301)")
    assert "at character 19" in message and "expected a date yyyyMMdd" in message


def test_an_unknown_function_is_refused_with_the_known_ones() -> None:
    message = refused("a/V/ymdh(2014010112)")
    assert "at character 5 in segment 'ymdh(2014010112)': unknown function 'ymdh'" in message
    assert "rymd" in message and "erymd" in message


@pytest.mark.parametrize(("value", "expected"), [
    ("i(x)", "expected i(digits), got 'x'"), ("i(-1)", "expected i(digits)"),
    ("i(2147483648)", "at most 2147483647"), ("b(128)", "at most 127"),
    ("t(yes)", "expected t(true) or t(false)"), ("d(1e999)", "finite"),
    ("null(x)", "expected null() with nothing inside"), ("ei(1,x)", "got 'x'"),
])
def test_a_malformed_typed_value_is_refused(value: str, expected: str) -> None:
    assert expected in refused(f"a/V/{value}")


@pytest.mark.parametrize(("pattern", "expected"), [
    ("a/V//b", "at character 5 in segment '': empty segment"),
    ("//V/b", "expected a package name such as app.eci.datamart, got ''"),
    ("a b/V", "expected a package name such as app.eci.datamart, got 'a b'"),
    ("a/ei(A,B)", "at character 3 in segment 'ei(A,B)': expected a view name or e(View1"),
    ("a/e(A,B-C)", "got 'B-C'"),
    ("a/V/x\\", "a '/' in a value is %2F"),
    ("a/V/%zz", "at character 5 in segment '%zz': expected two hex digits"),
    ("a/V/%C3", "expected %-escapes that encode UTF-8"),
])
def test_other_malformed_patterns_are_refused(pattern: str, expected: str) -> None:
    assert expected in refused(pattern)


def test_a_pattern_over_the_limit_is_refused_before_it_is_expanded() -> None:
    began = time.monotonic()
    message = refused("a/V/rymd(00010101-99991231)/ei(1,2)")
    assert time.monotonic() - began < 2  # counted, not built: milliseconds
    assert "7,304,118 view partitions, more than the limit of 1,000,000" in message
    assert "segment 'rymd(00010101-99991231)' alone gives 3,652,059" in message
    assert "limit of 10" in refused("a/e(A,B)/rym(201401-201406)", limit=10)
    assert len(parse_pattern("a/e(A,B)/rym(201401-201405)", limit=10)) == 10


# Round trip


_names = st.builds(str.__add__, st.sampled_from("aZ_"),
                   st.text(alphabet="abzAZ09_", max_size=8))
# Any text but control characters, which a pattern refuses wherever they stand.
_value = st.none() | st.text(st.characters(blacklist_categories=("Cc",)),
                             max_size=12) | st.sampled_from(
    ["null()", "i(5)", "e(a,b)", "a\\", "\\(", "%2F", "+", " ", "a/b", "rym(201401)", ""])


@settings(max_examples=200, deadline=None)
@given(st.lists(_names, min_size=1, max_size=3), _names, st.lists(_value, max_size=5))
def test_an_address_path_parses_back_to_the_address(
        package: list[str], view: str, parameters: list[str | None]) -> None:
    address = ViewAddress(".".join(package), view, tuple(parameters))
    assert parse_pattern(address.path) == [address]
    assert parse_pattern("/" + address.path + "/") == [address]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab/\\(),-%+ eimdrylt0123.", max_size=30))
def test_any_text_parses_or_is_refused_as_an_invalid_request(pattern: str) -> None:
    try:
        addresses = parse_pattern(pattern, limit=1000)
    except InvalidRequest as error:
        assert error.details[0]["field"] == "pattern"
    else:
        assert 1 <= len(addresses) <= 1000
