"""Itanium C++ ABI demangling, the subset GPU kernel names use, in pure Python.

ROCm's profilers (and some CUDA traces) record kernel names mangled:
``_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdI...EEEEJNSM_5KargsEEEEvDpT1_`` is
``void ck_tile::kentry<1, ck_tile::Rmsnorm2dFwd<...>, ck_tile::Rmsnorm2dFwd<...>::Kargs>(...)``.
:func:`demangle` reads nested and template names, template arguments (types, integer, bool and
enum literals, argument packs), builtin, qualified, pointer and reference types, template
parameters and substitutions (``S_``, ``S0_``, ``St``...), as ``c++filt`` prints them. Anything
else (operators, lambdas, expressions, function types) makes it return None, and the name stays
as recorded: a wrong name is worse than a mangled one.

:func:`display_name` is the name to show and to categorize (the demangled one when there is one);
:func:`demangled` does the same over a Polars column, once per distinct name.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

#: Builtin types by their code, as c++filt prints them.
BUILTIN: dict[str, str] = {
    "v": "void", "w": "wchar_t", "b": "bool", "c": "char", "a": "signed char",
    "h": "unsigned char", "s": "short", "t": "unsigned short", "i": "int", "j": "unsigned int",
    "l": "long", "m": "unsigned long", "x": "long long", "y": "unsigned long long",
    "n": "__int128", "o": "unsigned __int128", "f": "float", "d": "double", "e": "long double",
    "g": "__float128", "z": "...",
}
#: ``D`` builtins: two characters after the ``D`` (``DF16b``... are longer, see _builtin_d).
BUILTIN_D: dict[str, str] = {
    "Dn": "decltype(nullptr)", "Dh": "half", "Ds": "char16_t", "Di": "char32_t", "Du": "char8_t",
    "Da": "auto", "Dc": "decltype(auto)", "Df": "decimal32", "Dd": "decimal64", "De": "decimal128",
}
#: Literal suffixes c++filt writes after an integer of these types.
LITERAL_SUFFIX = {"i": "", "j": "u", "l": "l", "m": "ul", "x": "ll", "y": "ull"}
#: Standard substitutions.
STD_SUBS = {
    "Sa": "std::allocator", "Sb": "std::basic_string", "Ss": "std::string",
    "Si": "std::istream", "So": "std::ostream", "Sd": "std::iostream",
}
#: Operator names (the ones kernel names use; ``cv``, conversions, is not read).
OPERATORS = {
    "cl": "()", "ix": "[]", "pl": "+", "mi": "-", "ml": "*", "dv": "/", "rm": "%", "an": "&",
    "or": "|", "eo": "^", "aS": "=", "pL": "+=", "mI": "-=", "mL": "*=", "dV": "/=", "eq": "==",
    "ne": "!=", "lt": "<", "gt": ">", "le": "<=", "ge": ">=", "nt": "!", "aa": "&&", "oo": "||",
    "ls": "<<", "rs": ">>", "co": "~", "pp": "++", "mm": "--", "pt": "->", "nw": " new",
    "dl": " delete",
}
#: Longer mangled names than this are left alone (a pathological input costs nothing).
MAX_LENGTH = 20_000


class _Unsupported(Exception):
    """The name uses a part of the ABI this subset does not read."""


class _Parser:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.subs: list[str] = []
        #: The template arguments of the encoding's name, which T_, T0_... refer to; a pack is a
        #: list of its arguments.
        self.targs: list[str | list[str]] = []
        #: The arguments of the template-args read last (the outermost, once it ends).
        self.last_args: list[str | list[str]] = []
        #: In a pack expansion: which element a pack parameter stands for, and the length of
        #: the pack met while finding it out.
        self.pack_index: int | None = None
        self.pack_len: int | None = None

    # -- characters ------------------------------------------------------------------------------

    def peek(self, n: int = 0) -> str:
        j = self.i + n
        return self.s[j] if j < len(self.s) else ""

    def take(self, prefix: str) -> bool:
        if self.s.startswith(prefix, self.i):
            self.i += len(prefix)
            return True
        return False

    def expect(self, prefix: str) -> None:
        if not self.take(prefix):
            raise _Unsupported(f"expected {prefix!r} at {self.i}")

    def number(self) -> int:
        neg = self.take("n")
        j = self.i
        while self.peek().isdigit():
            self.i += 1
        if j == self.i:
            raise _Unsupported(f"expected a number at {j}")
        value = int(self.s[j:self.i])
        return -value if neg else value

    # -- the grammar ----------------------------------------------------------------------------

    def encoding(self, inner: bool = False) -> str:
        """A function or data name with its parameters; ``inner``: the function of a local
        name, whose parameters end at its ``E``."""
        name, is_template, quals = self.name(top=True)
        if self.i >= len(self.s) or (inner and self.peek() == "E"):
            return name + quals  # a data name
        params: list[str] = []
        ret = ""
        if is_template:
            ret = self.type()
        while self.i < len(self.s) and not (inner and self.peek() == "E"):
            if self.peek() == ".":  # a clone suffix: _Z3fooi.constprop.0
                break
            params.append(self.type())
        if params == ["void"]:
            params = []
        text = f"{name}({', '.join(params)}){quals}"
        # c++filt leaves out the return type of a local name's function
        return f"{ret} {text}" if ret and not inner else text

    def name(self, top: bool = False) -> tuple[str, bool, str]:
        """A name, whether it ends in template arguments, and the cv-qualifiers of the member
        function it names (printed after its parameters)."""
        if self.peek() == "N":
            return self.nested(top)
        if self.peek() == "Z":
            base, quals = self.local_name()
            if self.peek() == "I":
                self.subs.append(base)
                return base + self.template_args(top), True, quals
            return base, False, quals
        if self.take("St"):
            base = "std::" + self.unqualified()
            if self.peek() == "I":
                self.subs.append(base)
                return base + self.template_args(top), True, ""
            return base, False, ""
        if self.peek() == "S":
            base = self.substitution()
            if self.peek() != "I":
                raise _Unsupported("substitution as a whole name")
            return base + self.template_args(top), True, ""
        base = self.unqualified()
        if self.peek() == "I":
            self.subs.append(base)
            return base + self.template_args(top), True, ""
        return base, False, ""

    def local_name(self) -> tuple[str, str]:
        """``Z <encoding> E <name> [<discriminator>]``: a name inside a function, such as a
        lambda: ``f(int)::{lambda()#1}``; and the cv-qualifiers of the member function it names."""
        self.expect("Z")
        outer = self.targs
        function = self.encoding(inner=True)
        self.targs = outer
        self.expect("E")
        quals = ""
        if self.take("s"):
            entity = "string literal"
        else:
            entity, _, quals = self.name()
        if self.take("__"):  # a discriminator: not printed
            self.number()
            self.expect("_")
        elif self.peek() == "_" and self.peek(1).isdigit():
            self.i += 2
        return f"{function}::{entity}", quals

    def nested(self, top: bool) -> tuple[str, bool, str]:
        self.expect("N")
        seen = set()
        while self.peek() in ("r", "V", "K"):
            seen.add(self.s[self.i])
            self.i += 1
        quals = "".join(text for code, text in (("K", " const"), ("V", " volatile"),
                                                ("r", " restrict")) if code in seen)
        if self.take("R"):
            quals += " &"
        elif self.take("O"):
            quals += " &&"
        parts = ""
        is_template = False
        args: list[str | list[str]] = []
        while True:
            c = self.peek()
            if c == "E":
                self.i += 1
                break
            if c == "":
                raise _Unsupported("unterminated nested name")
            if c == "I":
                if not parts:
                    raise _Unsupported("template arguments without a name")
                parts += self.template_args(False)
                args = self.last_args
                is_template = True
            elif c == "S" and not parts:
                if self.take("St"):
                    parts = "std::" + self.unqualified()
                else:
                    parts = self.substitution()
                    is_template = False
                    if self.peek() == "E":
                        raise _Unsupported("a nested name that is only a substitution")
                    continue  # a substitution is not added again
            elif c == "T" and not parts:
                parts = self.template_param()
            elif c == "Z" and not parts:
                parts, inner = self.local_name()
                parts += inner
            elif c == "D" and self.peek(1) in ("t", "T"):
                raise _Unsupported("decltype in a name")
            else:
                name = self.unqualified()
                parts = f"{parts}::{name}" if parts else name
                is_template = False
            if self.peek() != "E":
                self.subs.append(parts)
        if top and is_template:
            self.targs = args
        return parts, is_template, quals

    def unqualified(self) -> str:
        c = self.peek()
        if c.isdigit():
            n = self.number()
            ident = self.s[self.i:self.i + n]
            if len(ident) != n:
                raise _Unsupported("identifier past the end")
            self.i += n
            return "(anonymous namespace)" if ident.startswith("_GLOBAL__N") else ident
        if c == "U" and self.peek(1) == "l":  # a lambda's closure type
            self.i += 2
            params = []
            while not self.take("E"):
                if self.peek() == "":
                    raise _Unsupported("unterminated lambda")
                params.append(self.type())
            number = 1 if self.take("_") else self.number() + 2
            if self.s[self.i - 1] != "_":
                self.expect("_")
            return f"{{lambda({', '.join(p for p in params if p != 'void')})#{number}}}"
        if c == "U" and self.peek(1) == "t":
            self.i += 2
            number = 1 if self.take("_") else self.number() + 2
            if self.s[self.i - 1] != "_":
                self.expect("_")
            return f"{{unnamed type#{number}}}"
        code = self.s[self.i:self.i + 2]
        if code in OPERATORS:
            self.i += 2
            return "operator" + OPERATORS[code]
        if c in ("C", "D") and self.peek(1) in "12345":
            raise _Unsupported("constructor or destructor")
        raise _Unsupported(f"unqualified name {c!r}")

    def substitution(self) -> str:
        for code, text in STD_SUBS.items():
            if self.take(code):
                return text
        self.expect("S")
        if self.take("_"):
            index = 0
        else:
            j = self.i
            while self.peek().isdigit() or self.peek().isupper():
                self.i += 1
            seq = self.s[j:self.i]
            if not seq:
                raise _Unsupported("bad substitution")
            self.expect("_")
            index = int(seq, 36) + 1
        if index >= len(self.subs):
            raise _Unsupported("substitution out of range")
        return self.subs[index]

    def template_param(self) -> str:
        self.expect("T")
        index = 0 if self.take("_") else self.number() + 1
        if not self.s[self.i - 1] == "_":
            self.expect("_")
        if index < len(self.targs):
            arg = self.targs[index]
            if not isinstance(arg, list):
                return arg
            if self.pack_index is not None and self.pack_index < len(arg):
                return arg[self.pack_index]
            self.pack_len = len(arg)
            return ", ".join(arg)
        return f"T{index}" if index else "T"

    def template_args(self, own: bool) -> str:
        self.expect("I")
        args: list[str | list[str]] = []
        while not self.take("E"):
            if self.peek() == "":
                raise _Unsupported("unterminated template arguments")
            args.append(self.template_arg())
        if own:
            self.targs = args
        self.last_args = args
        flat = [", ".join(a) if isinstance(a, list) else a for a in args]
        text = ", ".join(x for x in flat if x)
        return f"<{text}>" if not text.endswith(">") else f"<{text} >"

    def template_arg(self) -> str | list[str]:
        c = self.peek()
        if c == "L":
            return self.literal()
        if c == "J":
            self.i += 1
            pack: list[str] = []
            while not self.take("E"):
                if self.peek() == "":
                    raise _Unsupported("unterminated pack")
                arg = self.template_arg()
                pack.extend(arg if isinstance(arg, list) else [arg])
            return pack
        if c == "X":
            raise _Unsupported("expression")
        return self.type()

    def literal(self) -> str:
        self.expect("L")
        if self.peek() == "_" or self.peek() == "Z":
            raise _Unsupported("external name literal")
        c = self.peek()
        if c == "b" and self.peek(1) in "01" and self.peek(2) == "E":
            self.i += 3
            return "true" if self.s[self.i - 2] == "1" else "false"
        if c in LITERAL_SUFFIX:
            self.i += 1
            value = self.number()
            self.expect("E")
            return f"{value}{LITERAL_SUFFIX[c]}"
        kind = self.type()
        value = self.number()
        self.expect("E")
        return f"({kind}){value}"

    def type(self) -> str:
        c = self.peek()
        if c in BUILTIN:
            self.i += 1
            return BUILTIN[c]
        if c == "u":
            raise _Unsupported("vendor type")
        if c == "D":
            text = self._builtin_d()
            if text is not None:
                return text
        if c in ("K", "V", "r"):
            seen = set()
            while self.peek() in ("K", "V", "r"):
                seen.add(self.s[self.i])
                self.i += 1
            quals = "".join(text for code, text in (("K", " const"), ("V", " volatile"),
                                                    ("r", " restrict")) if code in seen)
            out = self.type() + quals
        elif c == "P":
            self.i += 1
            out = self.type() + "*"
        elif c == "R":
            self.i += 1
            out = self.type() + "&"
        elif c == "O":
            self.i += 1
            out = self.type() + "&&"
        elif c == "T":
            out = self.template_param()
            if self.peek() == "I":
                self.subs.append(out)
                out += self.template_args(False)
        elif c == "S" and self.peek(1) != "t":
            out = self.substitution()
            if self.peek() != "I":
                return out  # a substitution used as a type is not added again
            out += self.template_args(False)
        elif c == "D" and self.peek(1) == "p":  # a pack expansion: c++filt prints the pack
            self.i += 2
            out = self.pack_expansion()
        elif c == "D" and self.peek(1) == "v":
            self.i += 2
            count = self.number()
            self.expect("_")
            out = f"{self.type()} __vector({count})"
        elif c in "NZ" or c.isdigit() or (c == "S" and self.peek(1) == "t"):
            out, _, quals = self.name()
            out += quals
        else:
            raise _Unsupported(f"type {c!r}")
        self.subs.append(out)
        return out

    def pack_expansion(self) -> str:
        """The pattern after ``Dp`` once per element of the pack it names (``DpPT_`` over
        <int, float> is "int*, float*")."""
        start, nsubs, outer = self.i, len(self.subs), self.pack_index
        self.pack_index, self.pack_len = None, None
        first = self.type()  # finds the pack's length
        count = self.pack_len
        if count is None:
            self.pack_index = outer
            return first
        items = []
        for k in range(count):
            self.i = start
            del self.subs[nsubs:]
            self.pack_index = k
            items.append(self.type())
        if not count:
            self.i = start
            self.pack_index = None
            self.type()
        self.pack_index = outer
        return ", ".join(items)

    def _builtin_d(self) -> str | None:
        """A ``D`` builtin, or None when the ``D`` starts something else."""
        code = self.s[self.i:self.i + 2]
        if code in BUILTIN_D:
            self.i += 2
            return BUILTIN_D[code]
        if code == "DF":  # DF16b: bfloat16; DF<N>_: _Float<N>; DF<N>x: _Float<N>x
            j = self.i + 2
            k = j
            while k < len(self.s) and self.s[k].isdigit():
                k += 1
            if k == j or k >= len(self.s):
                raise _Unsupported("bad DF type")
            bits, tail = self.s[j:k], self.s[k]
            self.i = k + 1
            if tail == "b" and bits == "16":
                return "std::bfloat16_t"
            if tail == "_":
                return f"_Float{bits}"
            if tail == "x":
                return f"_Float{bits}x"
            raise _Unsupported("bad DF type")
        return None


@functools.lru_cache(maxsize=65536)
def demangle(name: str) -> str | None:
    """The demangled form of an Itanium-mangled ``name`` (``_Z...``), or None when it is not
    one or uses what this subset does not read."""
    if not name.startswith("_Z") or len(name) > MAX_LENGTH:
        return None
    p = _Parser(name)
    p.i = 2
    try:
        text = p.encoding()
    except (_Unsupported, ValueError, IndexError, RecursionError):
        return None
    if p.i < len(name) and name[p.i] != ".":
        return None
    return text


def display_name(name: str) -> str:
    """``name`` as users should read it: demangled when it is a mangled name we can read."""
    return demangle(name) or name


def demangled(name: pl.Expr) -> pl.Expr:
    """A String expression: each mangled name of ``name`` demangled, the others as they are.
    Meant for a column of distinct names (the ingestors' per-name columns)."""
    import polars as pl

    return (
        pl.when(name.str.starts_with("_Z"))
        .then(name.map_elements(display_name, return_dtype=pl.String, skip_nulls=True))
        .otherwise(name)
    )


def demangle_gpu(gpu: pl.DataFrame) -> pl.DataFrame:
    """A canonical GPU frame with its mangled kernel names demangled (the name as recorded kept
    in ``mangled_name``) and those kernels' categories taken from the demangled names; the
    frame itself when no name is mangled.

    Every ingestor's frame goes through it (:meth:`traceanalyzer.ingest.formats.Format.read`).
    The names, categories and mangled names are worked out once per distinct name and gathered
    by row: matching the category patterns on every row, and a coalesce of the texts, took
    3.1 of a 100 MB trace's 4 CPU seconds of reading, and wrote every row's name out again
    (bench/NOTES.md, "Texts stored once").
    """
    import polars as pl

    from traceanalyzer.categories import kernel_category
    from traceanalyzer.texts import spread

    if gpu.height == 0 or "name" not in gpu.columns:
        return gpu
    recorded = gpu["name"].cast(pl.String)
    if not recorded.str.starts_with("_Z").any():
        return gpu
    categories = recorded.cast(pl.Categorical)
    distinct = categories.drop_nulls().unique()
    texts = distinct.cast(pl.String)
    mangled = texts.filter(texts.str.starts_with("_Z")).to_list()
    mapping = {n: d for n in mangled if (d := demangle(n)) is not None}
    if not mapping:
        return gpu
    per_name = pl.DataFrame({"text": texts}).with_columns(
        demangled=pl.col("text").replace_strict(mapping, default=None, return_dtype=pl.String))
    changed = pl.col("demangled").is_not_null()
    cat_dtype = gpu.schema.get("category")
    per_name = per_name.select(
        changed.alias("changed"),
        pl.coalesce("demangled", "text").alias("name"),
        pl.when(changed).then("text").alias("mangled"),
        kernel_category(pl.col("demangled")).cast(cat_dtype or pl.String).alias("category"),
    )
    by_row = pl.DataFrame([spread(categories, distinct, per_name[c]) for c in per_name.columns])
    was_changed = by_row["changed"].fill_null(False)
    columns = [by_row["name"].cast(gpu.schema["name"]).alias("name")]
    if "mangled_name" in gpu.columns:
        old = gpu["mangled_name"]
        columns.append(by_row["mangled"].alias("mangled_name") if old.null_count() == old.len()
                       else pl.when(was_changed).then(by_row["mangled"]).otherwise(old)
                       .cast(old.dtype).alias("mangled_name"))
    if cat_dtype is not None:
        recategorized = was_changed & (gpu["kind"].cast(pl.String) == "kernel")
        columns.append(pl.when(recategorized).then(by_row["category"])
                       .otherwise(pl.col("category")).alias("category"))
    return gpu.with_columns(columns)
