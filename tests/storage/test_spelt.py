"""spelt: a missing local file found under another spelling of its path (case, Unicode form),
on real folders."""

from __future__ import annotations

import unicodedata
from pathlib import Path

from shardpack.storage.spelt import how_spelt, spelt_otherwise


def test_each_missing_part_is_the_one_entry_alike_but_for_case_and_form(tmp_path: Path):
    nfd = unicodedata.normalize("NFD", "Tür")
    (tmp_path / "Imgs" / nfd).mkdir(parents=True)
    (tmp_path / "Imgs" / nfd / "A.JPG").write_bytes(b"x")
    assert spelt_otherwise(str(tmp_path), "imgs/tür/a.jpg") == f"Imgs/{nfd}/A.JPG"
    absolute = f"{tmp_path}/imgs/tür/a.jpg"  # an absolute path: looked for from /
    assert spelt_otherwise("/elsewhere", absolute) == f"{tmp_path}/Imgs/{nfd}/A.JPG"
    assert spelt_otherwise(str(tmp_path), "Imgs/x/../tür/a.jpg") is None  # '..' not looked past
    assert spelt_otherwise(str(tmp_path), "imgs/tür/b.jpg") is None  # no such file at all
    (tmp_path / "IMGS").mkdir()  # two alike: which was meant cannot be told
    assert spelt_otherwise(str(tmp_path), "imgs/tür/a.jpg") is None
    assert how_spelt("a.jpg", "A.JPG").startswith(", but it is there as 'A.JPG', in another case")
    said = how_spelt("Tür.jpg", f"{nfd}.jpg")
    assert said.startswith(", but it is there named in Unicode NFD (as macOS writes names)")
