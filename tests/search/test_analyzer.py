"""The analyzer of profile engram-hybrid/v2 (SPEC §9): per-language stop lists and stemming."""

from __future__ import annotations

import pytest

from engram_core.languages import SEARCH_LANGUAGES
from search_service.analyzer import Analyzer, analyzer_for


def test_languages_and_unknown_refused():
    assert SEARCH_LANGUAGES == ("en", "de", "none")
    with pytest.raises(ValueError):
        Analyzer("fr")
    assert analyzer_for("en") is analyzer_for("en")


def test_english_stop_list_is_lucenes_33_words():
    stop = Analyzer("en").stop_words
    assert len(stop) == 33
    assert {"a", "an", "and", "the", "with", "will", "such", "into", "their"} <= stop
    assert "about" not in stop and "ml" not in stop


def test_german_stop_list_is_snowballs():
    stop = Analyzer("de").stop_words
    assert len(stop) == 231
    assert {"aber", "daß", "für", "über", "während", "würden", "zwischen", "und", "der"} <= stop


def test_exact_copy_drops_stop_words_and_single_ascii_characters_keeps_two():
    en = Analyzer("en")
    assert en.exact("The ML model is in a KG of NP") == ["ml", "model", "kg", "np"]
    assert Analyzer("none").exact("The ML model is in a KG") == ["the", "ml", "model", "is", "in", "kg"]
    assert Analyzer("de").exact("Der Plan und die Häuser") == ["plan", "häuser"]


def test_stemmed_copy_is_snowball():
    en, de, none = Analyzer("en"), Analyzer("de"), Analyzer("none")
    assert en.stemmed(["running", "runs", "caches", "generously"]) == ["run", "run", "cach", "generous"]
    assert de.stemmed(["häuser", "laufen", "straße"]) == ["haus", "lauf", "strass"]
    assert none.stemmed(["running"]) == [] and not none.stems and en.stems


def test_config_names_language_lists_and_stemmer():
    config = Analyzer("de").config()
    assert config["language"] == "de" and config["stop_words"] == 231
    assert "german" in str(config["stemmer"]) and "PyStemmer" in str(config["stemmer"])
    assert Analyzer("none").config()["stemmer"] == "none"
