"""A NUL byte in a KB record is refused with FILE:LINE by every reader (issue 32 item 5)."""
import pytest

from spacy_pel.kb import KBFormatError, read_kb


@pytest.mark.parametrize("fmt,text,line", [
    ("medic", "MESH:D001||Anemia|Anae\x00mia\nMESH:D002||Gout\n", 1),
    ("obo", "format-version: 1.2\n\n[Term]\nid: HP:1\nname: ok\n\n[Term]\nid: HP:2\nname: bad\x00name\n", 7),
])
def test_nul_in_a_name_is_refused_naming_the_line(tmp_path, fmt, text, line):
    path = tmp_path / f"kb.{fmt}"
    path.write_bytes(text.encode("utf8"))
    with pytest.raises(KBFormatError, match=rf"kb\.{fmt}:{line}: .*NUL"):
        read_kb(path, fmt)
