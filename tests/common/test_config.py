"""The configuration table: defaults, validation, and the rendered documented file."""
from __future__ import annotations

import os
import typing

import pytest

from common import config as cfg


def test_defaults_fill_every_key(tmp_path):
    """An empty file gives every documented default."""
    p = tmp_path / "a.toml"
    p.write_text("")
    c = cfg.load(str(p))
    assert c.metadata.poll_interval_s == 5.0
    assert c.spool.size_mb == 64
    assert c.node.name  # the host name when unset


def test_unknown_key_is_refused(tmp_path):
    """A typo must not silently fall back to a default."""
    p = tmp_path / "a.toml"
    p.write_text("[metadata]\npoll_intervall_s = 1\n")
    with pytest.raises(cfg.ConfigError, match=r"metadata\.poll_intervall_s"):
        cfg.load(str(p))


def test_wrong_type_names_the_key(tmp_path):
    p = tmp_path / "a.toml"
    p.write_text('[spool]\nsize_mb = "big"\n')
    with pytest.raises(cfg.ConfigError, match=r"spool\.size_mb must be int"):
        cfg.load(str(p))


def test_int_accepted_for_float(tmp_path):
    p = tmp_path / "a.toml"
    p.write_text("[metadata]\npoll_interval_s = 1\n")
    assert cfg.load(str(p)).metadata.poll_interval_s == 1.0


def test_bad_toml_is_a_clear_error(tmp_path):
    p = tmp_path / "a.toml"
    p.write_bytes(b"[node\nname=\xff")
    with pytest.raises(cfg.ConfigError, match="not valid TOML"):
        cfg.load(str(p))


def test_oversized_file_refused(tmp_path):
    p = tmp_path / "a.toml"
    p.write_text("# x\n" * 100000)
    with pytest.raises(cfg.ConfigError, match="larger than"):
        cfg.load(str(p))


def test_world_writable_config_refused(tmp_path):
    p = tmp_path / "a.toml"
    p.write_text("")
    os.chmod(p, 0o666)
    with pytest.raises(cfg.ConfigError, match="world-writable"):
        cfg.load(str(p))


def test_explicit_missing_file_is_an_error(tmp_path):
    with pytest.raises(cfg.ConfigError, match="no such"):
        cfg.load(str(tmp_path / "missing.toml"))


def test_semantic_checks():
    with pytest.raises(cfg.ConfigError, match="scheduler"):
        cfg.build({"node": {"scheduler": "nomad"}})
    with pytest.raises(cfg.ConfigError, match="imds_token_ttl_s"):
        cfg.build({"metadata": {"imds_token_ttl_s": 0}})
    with pytest.raises(cfg.ConfigError, match="octal"):
        cfg.build({"agent_socket": {"mode": "rw-rw----"}})


def test_overrides_merge_over_file(tmp_path):
    p = tmp_path / "a.toml"
    p.write_text('[node]\nname = "n1"\nhall = "h1"\n')
    c = cfg.load(str(p), overrides={"node": {"hall": "h2"}})
    assert (c.node.name, c.node.hall) == ("n1", "h2")


def test_documented_file_is_in_sync():
    """deploy/sco-agent.toml is rendered from SETTINGS; a stale copy fails here."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(repo, "deploy", "sco-agent.toml")) as f:
        assert f.read() == cfg.render_toml()


def test_rendered_file_loads_to_defaults(tmp_path):
    p = tmp_path / "a.toml"
    p.write_text(cfg.render_toml())
    c = cfg.load(str(p))
    d = cfg.defaults()
    d["node"]["name"] = c.node.name
    assert c.as_dict() == d


# The typed section classes repeat SETTINGS' keys for the type checker; these tests keep the two
# from drifting apart (a key added to the table and not to its class, or the other way round).
_HINT = {str: str, int: int, float: float, bool: bool, list: list[str]}


def test_section_classes_cover_the_table_in_its_order():
    assert list(cfg.SECTION_CLASSES) == list(dict.fromkeys(s.section for s in cfg.SETTINGS))
    assert set(cfg.Config.__slots__) == {"source", *cfg.SECTION_CLASSES}
    assert set(cfg.Config.__annotations__) == {"source", *cfg.SECTION_CLASSES}


@pytest.mark.parametrize("section", sorted(cfg.SECTION_CLASSES))
def test_section_class_fields_and_types_equal_the_table(section):
    cls = cfg.SECTION_CLASSES[section]
    rows = [s for s in cfg.SETTINGS if s.section == section]
    assert list(cls._fields) == [s.key for s in rows]
    assert typing.get_type_hints(cls) == {s.key: _HINT[s.type] for s in rows}
    assert typing.get_type_hints(cfg.Config)[section] is cls


def test_sections_are_read_only():
    c = cfg.build({})
    with pytest.raises(AttributeError):
        c.relay.servers = []  # a NamedTuple refuses it


def test_a_key_the_class_lacks_fails_at_construction():
    # The construction itself is a second guard: keyword arguments must match the fields.
    values = cfg.defaults()
    values["spool"]["unheard_of"] = 1
    with pytest.raises(TypeError):
        cfg.Config(values, "<test>")
