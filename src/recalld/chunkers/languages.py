"""The tree-sitter grammars recalld knows, and how to name the definitions in each.

Each grammar ships as its own wheel (`tree-sitter-python`, ...) exposing a `language()`
capsule; `tree-sitter-typescript` has two, for `.ts` and `.tsx`. A `LanguageSpec` lists the
node types that define something (with the symbol kind to report), the sibling node types that
belong to the definition after them (comments, decorators, attributes), and the wrapper nodes
whose span a definition takes over (`export`, `@decorator`, `template<...>`).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from tree_sitter import Language, Node, Query

_COMMENTS = frozenset({"comment", "line_comment", "block_comment"})


@dataclass(frozen=True)
class LanguageSpec:
    """How to chunk and name one language.

    Attributes:
        name: The language name reported in `meta["language"]`.
        module: The grammar wheel's module.
        function: The function in `module` that returns the grammar.
        definitions: Definition node type -> symbol kind.
        attached: Node types that stay with the definition right below them.
        wrappers: Node types whose span replaces that of the definition they wrap.
    """

    name: str
    module: str
    definitions: Mapping[str, str]
    function: str = "language"
    attached: frozenset[str] = _COMMENTS
    wrappers: frozenset[str] = field(default_factory=frozenset)


_JS_DEFS = {
    "function_declaration": "function",
    "generator_function_declaration": "function",
    "class_declaration": "class",
    "method_definition": "method",
    "variable_declarator": "function",  # only `const f = () => ...`, see `is_definition`
}
_TS_DEFS = {
    **_JS_DEFS,
    "abstract_class_declaration": "class",
    "interface_declaration": "interface",
    "type_alias_declaration": "type",
    "enum_declaration": "enum",
    "internal_module": "namespace",
    "function_signature": "function",
    "abstract_method_signature": "method",
}
_JS_WRAPPERS = frozenset({"export_statement", "lexical_declaration", "variable_declaration"})
_C_DEFS = {
    "function_definition": "function",
    "struct_specifier": "struct",
    "union_specifier": "union",
    "enum_specifier": "enum",
    "type_definition": "type",
}

LANGUAGES: dict[str, LanguageSpec] = {
    spec.name: spec
    for spec in (
        LanguageSpec(
            "python",
            "tree_sitter_python",
            {"function_definition": "function", "class_definition": "class"},
            wrappers=frozenset({"decorated_definition"}),
        ),
        LanguageSpec(
            "javascript",
            "tree_sitter_javascript",
            _JS_DEFS,
            attached=_COMMENTS | {"decorator"},
            wrappers=_JS_WRAPPERS,
        ),
        LanguageSpec(
            "typescript",
            "tree_sitter_typescript",
            _TS_DEFS,
            function="language_typescript",
            attached=_COMMENTS | {"decorator"},
            wrappers=_JS_WRAPPERS,
        ),
        LanguageSpec(
            "tsx",
            "tree_sitter_typescript",
            _TS_DEFS,
            function="language_tsx",
            attached=_COMMENTS | {"decorator"},
            wrappers=_JS_WRAPPERS,
        ),
        LanguageSpec(
            "go",
            "tree_sitter_go",
            {
                "function_declaration": "function",
                "method_declaration": "method",
                "type_spec": "type",
            },
            wrappers=frozenset({"type_declaration"}),
        ),
        LanguageSpec(
            "rust",
            "tree_sitter_rust",
            {
                "function_item": "function",
                "function_signature_item": "function",
                "struct_item": "struct",
                "enum_item": "enum",
                "union_item": "union",
                "trait_item": "trait",
                "impl_item": "impl",
                "mod_item": "module",
                "macro_definition": "macro",
            },
            attached=_COMMENTS | {"attribute_item"},
        ),
        LanguageSpec(
            "java",
            "tree_sitter_java",
            {
                "class_declaration": "class",
                "interface_declaration": "interface",
                "enum_declaration": "enum",
                "record_declaration": "record",
                "annotation_type_declaration": "annotation",
                "method_declaration": "method",
                "constructor_declaration": "constructor",
            },
        ),
        LanguageSpec("c", "tree_sitter_c", _C_DEFS),
        LanguageSpec(
            "cpp",
            "tree_sitter_cpp",
            {**_C_DEFS, "class_specifier": "class", "namespace_definition": "namespace"},
            wrappers=frozenset({"template_declaration"}),
        ),
        LanguageSpec(
            "ruby",
            "tree_sitter_ruby",
            {
                "method": "method",
                "singleton_method": "method",
                "class": "class",
                "singleton_class": "class",
                "module": "module",
            },
        ),
    )
}

# Kinds whose functions are reported as methods.
_CLASS_KINDS = frozenset({"class", "struct", "impl", "trait", "interface", "record", "enum"})
_FUNCTION_VALUES = frozenset(
    {"arrow_function", "function_expression", "function", "generator_function"}
)


@functools.cache
def load_language(name: str) -> Language:
    """Load (once per process) the grammar of the language called `name`."""
    spec = LANGUAGES[name]
    module = importlib.import_module(spec.module)
    return Language(getattr(module, spec.function)())


@functools.cache
def definitions_query(name: str) -> Query:
    """A query capturing every definition node of the language as `@def`."""
    language = load_language(name)
    kinds = [k for k in LANGUAGES[name].definitions if language.id_for_node_kind(k, True)]
    return Query(language, " ".join(f"({kind}) @def" for kind in kinds))


def is_definition(node: Node) -> bool:
    """Filter captures that only sometimes define something."""
    if node.type == "variable_declarator":
        value = node.child_by_field_name("value")
        return value is not None and value.type in _FUNCTION_VALUES
    if node.type in ("struct_specifier", "union_specifier", "enum_specifier", "class_specifier"):
        # `struct S *p;` mentions a type; only a body defines one.
        return node.child_by_field_name("body") is not None
    return True


def _text(node: Node | None) -> str:
    if node is None or node.text is None:
        return ""
    return node.text.decode("utf-8", "replace")


def definition_name(node: Node) -> str:
    """The unqualified name of a definition node (`<anonymous>` if it has none)."""
    if node.type == "impl_item":
        return _text(node.child_by_field_name("type")) or "<impl>"
    if (
        node.type in ("function_definition", "type_definition")
        and node.child_by_field_name("name") is None
    ):
        # C and C++ hide the name inside nested declarators: `int *(*f)(void)`.
        declarator = node.child_by_field_name("declarator")
        while declarator is not None and declarator.child_by_field_name("declarator"):
            declarator = declarator.child_by_field_name("declarator")
        name = _text(declarator).replace("::", ".")
    else:
        name = _text(node.child_by_field_name("name"))
    if node.type == "method_declaration" and (receiver := node.child_by_field_name("receiver")):
        # Go: func (r *Recv[T]) Name() -> Recv.Name
        words = _text(receiver).strip("()").replace("*", " ").split()
        if words:
            name = f"{words[-1].split('[')[0]}.{name}"
    return " ".join(name.split()) or "<anonymous>"


def symbol_kind(kind: str, parent_kind: str | None) -> str:
    """The kind to report: a function directly inside a class-like definition is a method."""
    if kind == "function" and parent_kind in _CLASS_KINDS:
        return "method"
    return kind
