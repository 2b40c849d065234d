"""The category matcher (_regexlite.h) answers as Polars' str.contains, or refuses a pattern.

The kernel categories of a small trace are matched in C (``_eventassemble``) with it, and must
agree with the Polars assembly, which matches them with Polars (the Rust regex crate).
"""

from __future__ import annotations

import random
import re

import polars as pl
import pytest

from traceanalyzer.categories import KERNEL_PATTERNS
from traceanalyzer.ingest.kineto import assemble

pytestmark = pytest.mark.skipif(not assemble.AVAILABLE,
                                reason="the C assembly is not built (no compiler at install)")


def search(pattern: str, texts: list[str]) -> list[bool] | None:
    return assemble._eventassemble.search(pattern, texts)


def polars(pattern: str, texts: list[str]) -> list[bool] | None:
    """Polars' answers, or None where it refuses the pattern."""
    try:
        return pl.Series(texts, dtype=pl.String).str.contains(pattern).to_list()
    except pl.exceptions.PolarsError:
        return None


def agree(pattern: str, texts: list[str], must_compile: bool = True) -> str:
    """Check each text; return "ok", or "refused" when only the matcher refuses the pattern
    (never where ``must_compile``), or "both refuse"."""
    ours, reference = search(pattern, texts), polars(pattern, texts)
    if ours is None:
        assert not (must_compile and reference is not None), f"refused {pattern!r}"
        return "both refuse" if reference is None else "refused"
    assert reference is not None, f"compiled {pattern!r}, which Polars refuses"
    wrong = [t for t, a, b in zip(texts, ours, reference, strict=True) if a != b]
    assert not wrong, f"{pattern!r} differs from Polars on {wrong[:5]!r}"
    return "ok"


rng = random.Random(12345)

EDGE_TEXTS = ["", "a", "b", "d", "\n", "a\n", "\na", "ab", "ba", "abc", "a b", "a-b", "a_b", "aa", "aaa", "aaaa",
              "lamb", "lambd", "lamb\n", "lamba", "lamb_", "x mm y", "mm", "mmm", "_mm_", "1mm", "mm1", "mm-",
              "-mm", "A", "AB", "Ab", "aB", "x\ny", "\n\n", "-", "]", "^", "$", "\\", ".", "a.b", "axb", "a\nb",
              "(a)", "{", "}", "a{2}", "ab\n", "b\na", "\t", " ", "\x0b", "\x0c", "\r", "_", "0", "9", "z", "Z",
              "a1", "sm90_xxx_tn", "sm_tn", "sm90tn", "sm90__tn", "cutlassmem_eff", "cutlass\nmem_eff", "\x00", "a\x00b",
              "word boundary", "x-y_z", "\r\n", "a\r\n", "a\r\nb", "a\r", "[", "z", "K", "abab", "aab", "abb", "\x7f", "~", "&", "@", "%", "/", "#", '"', "'"]

HAND = [
    # literals, escapes
    "a", "ab", "abc", r"a\.b", r"a\-b", r"\(a\)", r"\[", r"\]", r"\{", r"\}", r"\*", r"\+", r"\?", r"\|", r"\^", r"\$",
    r"\\", r"\/", r"\#", r"\ ", r"\&", r"\~", r"\@", r"\%", r"\_", r'\"', r"\'", r"\n", r"\t", r"\r", r"\v", r"\f",
    r"\a", r"\x41", r"\x61", r"\x{62}", r"\x{000061}", r"\x00", "]", "}", "a]", "a}", "-", "&&", "--", "~~", "\n", "\x00",
    # dot
    ".", "a.b", "a..", "(?s).", "(?s)a.b", "(?-s:.)", "^.$", ".*", ".+", "^.*$", "(?s)^.*$",
    # classes
    "[a]", "[ab]", "[a-c]", "[^a]", "[^d]", "[^ab]", "[a-]", "[-a]", "[a-b-c]", "[]a]", "[^]a]", "[]-a]", "[a-]]",
    r"[\]]", r"[\[]", r"[\-]", r"[\^]", "[a^]", r"[\\]", r"[\n]", r"[^\n]", r"[\d]", r"[\w]", r"[\s]", r"[\D]",
    r"[\W]", r"[\S]", r"[^\d]", r"[^\w]", r"[^\s]", r"[a\d]", r"[\d-]", r"[-\d]", r"[\x41-\x43]", r"[\x00-\x7f]",
    "[&]", "[~]", "[a&b]", "[ ]", "[.]", "[$]", "[|]", "[(]", "[)]", "[*]", "[+]", "[?]", "[{]", "[}]", "[0-9]",
    "[0-9a-f]", "[^0-9]", "[a-a]", "[_]", r"[\/]", "[#]",
    # perl classes
    r"\d", r"\w", r"\s", r"\D", r"\W", r"\S", r"\d+", r"\w\W", r"^\s", r"\s$", r"\S\s\S",
    # anchors
    "^", "$", "^$", "^a", "a$", "^a$", "^ab", "b$", r"\Aa", r"a\z", r"\A", r"\z", r"\A\z", "a^", "$a", "^^a", "a$$",
    "(?m)^", "(?m)$", "(?m)^a", "(?m)a$", "(?m)^$", "(?m)^b", "(?m)b$", "(?m)^a$", r"(?m)\Aa", r"(?m)a\z", "(?m:^b)|c",
    "^*a", "a$*", r"\b+a", "(^)*a", "(^|a)b", "(a|^)b", "b(a|$)", "b($|a)", "(?m)(^|a)b",
    # word boundaries
    r"\b", r"\B", r"\ba", r"a\b", r"\ba\b", r"\Ba", r"a\B", r"\Ba\B", r"\bmm\b", r"(?-u:\b)mm(?-u:\b)",
    r"(?-u:\B)mm", r"\b-", r"-\b", r"\B-", r"-\B", r"^\b", r"\b$", r"^\B", r"\B$", r"\b\b", r"\b\B", r"\<a", r"a\>",
    r"\<", r"\>", r"\<mm\>", r"(?-u:\<)a", r"\b_", r"_\b",
    # groups, alternation
    "(a)", "(?:a)", "((a))", "(?:(?:a)b)", "()", "(?:)", "a()b", "(|a)", "(a|)", "a|", "|a", "|", "||", "a||b",
    "(a|b)", "(a|b)c", "a(b|c)", "a(b|c)d", "(a|b)(c|d)", "((a|b)|c)", "(a(b|c))", "lamb([^d]|$)", "(a|ab)(c|bcd)(d*)",
    "(?:a|b|)c", "x(|a|b)y", "(a)|b", "a|(b)",
    # quantifiers
    "a*", "a+", "a?", "a*?", "a+?", "a??", "ab*", "ab+", "ab?", "a*b", "a+b", "a?b", "(ab)*", "(ab)+", "(ab)?",
    "(ab)+c", "(a|b)+", "(a|b)*c", "a{2}", "a{2,}", "a{2,3}", "a{0}", "a{0,}", "a{0,1}", "a{1,1}", "a{01}",
    "(ab){2}", "(a|b){2,3}", "a{2}?", "a****", "(a|b)**", "a{2}{3}{1,2}", "(?:a?){5}b", r"[\]-a]", r"[\]-\x61]", "a{2,}?", "x(a{0})y", "a**", "a*??", "a{2}{3}", "a{2}*", "(a*)*", "(a*)+",
    "(a?)*b", "(|a)+b", "(a*b*)*c", "((a)*)*", r"(\b)*a", r"(\b|a)+b", "a{1000}", "a{0,1000}b",
    # flags
    "(?i)a", "(?i)ab", "(?i)A", "(?i:a)b", "a(?i)b", "a(?i)b|c", "(a(?i))b", "(a(?i))B", "(?i)[a-c]", "(?i)[^a]",
    r"(?i)[^\W]", "(?i)[A-Z]", "(?i)[^A-Z]", "(?i-i:a)", "(?-i)a", "(?i)(?-i)a", "(?im)^a", "(?is).", "(?U)a+",
    "(?u)a", r"(?u)\w", "(?-u)a", r"(?-u)\w", r"(?-u)\d", r"(?-u)\s", "(?-u:a)", "(?i)(?-u:a)", "(?m-s)^.",
    "(?i)lamb([^d]|$)", "(?i:a|b)c", "(?:(?i)a)b", "(?i)k", "(?i)s",
    # kernel patterns' pieces
    r"sm[0-9]+_.*_tn", r"sm[0-9]+_.*_nt", "cutlass.*mem_eff", "all_?reduce_kernel", "reduce_?scatter", "cat_?array",
    "^nccl|ncclkernel", "^cijk_",
    # more edges
    "\\\x00", "(?m)a\r?$", "(?m)^b", "a\r", "(?i)[Z-a]", "(?i)[^Z-a]", r"(?i)\W", r"[\x00-\x{7f}]", r"\x{7F}",
    "(?-s:.)", r"a|\b", r"\B|\<", r"(?i)\Bk", "[ -~]", "[^ -~]", "[\t-\r]", r"[\s\S]", r"[^\s\S]", r"[\w\W]",
]

# Valid in Rust, and refused here.
UNSUPPORTED = [
    r"(?P<n>a)", r"(?<n>a)", r"\pL", r"\p{L}", r"\PL", r"\u0041", r"\U00000041", r"\u{41}", r"\b{start}a",
    r"a\b{end}", r"\b{start-half}a", r"\b{2}", "(?x)a b", "(?R)a", "[[:alpha:]]", "[a[b]]", "[a&&b]", "[a--b]",
    "[a~~b]", "a{ 2}", "a{2 }", "a{2, 3}", r"\x{80}", r"\x80", r"[\x80]", "é", "[é]", "a{1001}", "[--]", "[a--]",
    "((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((a))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))",
]
INVALID = [  # Polars refuses these
    "(", ")", "a)", "(a", "[", "[]", "[^]", "[a", "*", "+", "?", "*a", "a|*", "(*)", "{", "a{", "a{b", "a{1",
    "a{,2}", "a{2,1}", r"\1", r"\0", r"\Z", r"\e", r"\cA", r"\x4", r"\x{}", r"\xg0", r"\q", "\\", r"[\b]", r"[\<]",
    r"[\A]", "[b-a]", r"[\d-z]", r"[a-\d]", "(?=a)", "(?!a)", "(?<=a)", "(?<!a)", "(?)", "(?-)", "(?i-)", "(?ii)",
    "(?i-i)", "(?-:a)", "(?i)*", "a(?i)*", "(?q)", "(?-u:.)", "(?-u:[^a])", r"(?-u:\W)", r"(?-u:\S)", r"(?-u:\D)",
    r"(?-u:[^\W])", "(?-u)[^a]", "a{1,2", "(?P<1>a)", r"[\]-\-]", r"[\]-.]",
]


def kernel_names() -> list[str]:
    """The distinct GPU activity names of the sample traces, lowercased as the assembly does."""
    from tests.support.paths import REPO
    from traceanalyzer.ingest import read_any

    names: set[str] = set()
    for path in sorted((REPO / "sample_traces" / "torch").glob("*.json.gz")):
        names.update(read_any(path).gpu["name"].unique().drop_nulls().to_list())
    return sorted(n.lower() for n in names if n.isascii())


def test_kernel_patterns_on_the_sample_traces_names():
    names = kernel_names()
    assert len(names) > 100
    for _, pattern in KERNEL_PATTERNS:
        assert agree(pattern, names) == "ok"


def fragments(pattern: str) -> list[str]:
    """The literal pieces of a pattern, with their prefixes and suffixes: near misses."""
    pieces = set()
    for branch in pattern.split("|"):
        for piece in re.split(r"[\^\$\(\)\[\]\*\+\?\.\\|]|\(\?-u:\\b\)", branch):
            for i in range(len(piece)):
                pieces.update({piece, piece[:i], piece[i:]})
    return sorted(p for p in pieces if p)


@pytest.mark.parametrize("category,pattern", KERNEL_PATTERNS, ids=[c for c, _ in KERNEL_PATTERNS])
def test_kernel_patterns_on_strings_made_of_their_own_pieces(category, pattern):
    pieces = fragments(pattern) + ["sm90_", "sm1_", "_tn", "_nt", "cutlass", "mem_eff", "lamb",
                                   "mm", " mm ", "_mm_", "void ", "cijk_"]
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789_- .:<>()\n\tABZ"
    texts = []
    for _ in range(1500):
        parts = []
        for _ in range(rng.randint(0, 6)):
            r = rng.random()
            if r < 0.55:
                parts.append(rng.choice(pieces))
            elif r < 0.9:
                parts.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 3))))
            else:
                parts.append(rng.choice(["\n", "", " ", "_", "d", "x"]))
        texts.append("".join(parts))
    assert agree(pattern, texts) == "ok"


@pytest.mark.parametrize("pattern", HAND)
def test_each_syntax_feature_and_edge(pattern):
    assert agree(pattern, EDGE_TEXTS) in ("ok", "both refuse")


@pytest.mark.parametrize("pattern", UNSUPPORTED)
def test_syntax_outside_the_subset_is_refused(pattern):
    assert agree(pattern, EDGE_TEXTS, must_compile=False) == "refused"


@pytest.mark.parametrize("pattern", ["(", "[]", "a{2,1}", r"\1", "(?=a)", "(?<!a)", "(?-u:.)",
                                     "(?-u)[^a]", r"[\d-z]", "*a"])
def test_what_polars_refuses_is_refused(pattern):
    assert agree(pattern, EDGE_TEXTS, must_compile=False) == "both refuse"


def test_long_repetitive_names():
    texts = ["sm1_" * 2500, "cutlass" + "x" * 10_000, "lamb" * 2500, "mm_" * 3333]
    for _, pattern in KERNEL_PATTERNS:
        assert agree(pattern, texts) == "ok"


# Random patterns of the subset's grammar, and junk, against short random texts.
def gen(depth: int = 0) -> str:
    r = rng.random()
    if depth > 3 or r < 0.3:
        return atom()
    if r < 0.5:
        return "".join(gen(depth + 1) for _ in range(rng.randint(2, 4)))
    if r < 0.65:
        return "|".join(gen(depth + 1) if rng.random() < 0.85 else "" for _ in range(rng.randint(2, 3)))
    if r < 0.85:
        return rng.choice(["(", "(?:", "(?i:", "(?m:", "(?s:", "(?-u:", "(?i)(", "(?-i:", "(?U:"]) + gen(depth + 1) + ")"
    return gen(depth + 1) + quant()


def quant() -> str:
    q = rng.choice(["*", "+", "?", "{0}", "{1}", "{2}", "{0,}", "{1,}", "{0,1}", "{1,2}", "{2,3}", "{0,3}"])
    return q + ("?" if rng.random() < 0.2 else "")


def cls_item() -> str:
    return rng.choice(["a", "b", "A", "_", "-", "a-c", "0-9", "\\d", "\\w", "\\s", "\\W", "\\n", "\\-", "\\]", "x",
                       " ", ".", "^", "\\^", "B-Z", "\\x41", "&", "~", "\\\\"])


def atom() -> str:
    r = rng.random()
    if r < 0.45:
        return rng.choice("aabbxAB_- 1\n.") if rng.random() < 0.8 else rng.choice(["\\.", "\\-", "\\n", "\\ ", "\\_", "\\x61", "\\{", "\\\\"])
    if r < 0.6:
        return rng.choice([".", "\\d", "\\w", "\\s", "\\D", "\\W", "\\S"])
    if r < 0.8:
        return "[" + ("^" if rng.random() < 0.3 else "") + "".join(cls_item() for _ in range(rng.randint(1, 3))) + "]"
    return rng.choice(["^", "$", "\\b", "\\B", "\\A", "\\z", "\\<", "\\>", "(?m)^", "(?m)$"])


JUNK = "ab()[]{}*+?|^$\\.-,0123:imsux<>=!&~ dwb"
RTEXT = "abAB_-1 \n.x"


def rtexts(k: int) -> list[str]:
    return [rng.choice(EDGE_TEXTS) if rng.random() < 0.1 else
            "".join(rng.choice(RTEXT) for _ in range(rng.randint(0, 10))) for _ in range(k)]


def test_random_patterns_agree_or_are_refused_for_a_documented_gap():
    gaps = re.compile(r"\{\s|\s\}|,\s|\[\[|\]\[|&&|--|~~|\\x[89a-fA-F]|\(\?[a-zA-Z-]*[xR]|"
                      r"\\[pPuU]|\\b\{|\(\?P?<")
    outcomes: dict[str, int] = {}
    for i in range(800):
        pattern = gen() if i % 4 else "".join(rng.choice(JUNK) for _ in range(rng.randint(1, 8)))
        outcome = agree(pattern, rtexts(60), must_compile=False)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if outcome == "refused":  # or past the DFA's size limits
            assert gaps.search(pattern) or pattern.count("(") >= 60, pattern
    assert outcomes["ok"] > 400
