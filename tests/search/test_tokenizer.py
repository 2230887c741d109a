import re
import unicodedata

import pytest

from search_service import tokenizer
from search_service.tokenizer import tokenize


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("Hello, World!", ["hello", "world"]),
        ("ab abc ABCD", ["ab", "abc", "abcd"]),  # two-character tokens kept (v2)
        ("é É ü", ["é", "é", "ü"]),
        ("日本 日本語", ["日本", "日本語"]),
        ("snake_case_name _ __ ___", ["snake_case_name", "__", "___"]),
        ("4 42 2024 v2 v22", ["42", "2024", "v2", "v22"]),
        ("٣٤ ٣", ["٣٤", "٣"]),  # Arabic-Indic digits are Nd and not ASCII
        ("foo-bar/baz.qux", ["foo", "bar", "baz", "qux"]),
        ("tab\tnew\nline", ["tab", "new", "line"]),
        ("", []),
        ("  \n\t ", []),
        ("a b c 1 2", []),
        ("ml kg np", ["ml", "kg", "np"]),
    ],
)
def test_examples(text, tokens):
    assert tokenize(text) == tokens


def test_other_number_categories_separate_tokens():
    assert tokenize("abc²def") == ["abc", "def"]  # ² is No
    assert tokenize("Ⅻabc") == ["abc"]  # Ⅻ is Nl
    assert tokenize("½ ① x²") == []
    assert tokenize("日本²語") == ["日本", "語"]


def test_marks_and_connectors_separate_tokens():
    assert tokenize("abc\u0301def") == ["abc", "def"]  # combining acute is Mn
    assert tokenize("abc\u203fdef") == ["abc", "def"]  # undertie is Pc, not "_"


def test_segmentation_happens_before_lowercasing():
    assert tokenize("İstanbul") == ["i\u0307stanbul"]
    assert tokenize("STRASSE Straße") == ["strasse", "straße"]


def test_drop_rule_applies_after_lowercasing():
    assert tokenize("\u212a") == []  # KELVIN SIGN lowercases to ASCII "k": one character
    assert tokenize("\u212am") == ["km"]


def test_duplicates_and_order_kept():
    assert tokenize("red green red") == ["red", "green", "red"]


def test_alphabet_is_exactly_letters_decimal_digits_underscore():
    word = re.compile(r"\w")
    for cp in range(0x110000):
        char = chr(cp)
        category = unicodedata.category(char)
        expected = category[0] == "L" or category == "Nd" or char == "_"
        assert tokenizer._in_alphabet(char) is expected, hex(cp)
        if expected:
            assert word.match(char), hex(cp)


def test_description_names_unicode_version():
    assert unicodedata.unidata_version in tokenizer.TOKENIZER_DESCRIPTION
