"""preview: the file's extension picks its format; its errors speak of the preview."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import cv2
import numpy as np
import pytest

from shardpack.read.preview import CELL
from tests.helpers import ctrl_c_as_opencv_loads, packed_tree, run_cli

# Each format's first bytes, as its decoders look for them.
MAGIC = {".png": b"\x89PNG\r\n\x1a\n", ".jpg": b"\xff\xd8\xff", ".jpeg": b"\xff\xd8\xff",
         ".webp": b"RIFF"}  # fmt: skip


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return packed_tree(tmp_path_factory.mktemp("p"), {"a": 3, "b": 2}, workers=1)


def _preview(*args: str) -> subprocess.CompletedProcess:
    return run_cli("preview", *args)


@pytest.mark.parametrize("ext", [".png", ".jpg", ".jpeg", ".webp", ".JPG"])
def test_the_extension_picks_the_format(out: Path, tmp_path: Path, ext: str):
    dest = tmp_path / f"sheet{ext}"
    result = _preview(str(out), "--out", str(dest))
    assert result.returncode == 0, result.stderr
    data = dest.read_bytes()
    assert data.startswith(MAGIC[ext.lower()])
    if ext.lower() == ".webp":
        assert data[8:12] == b"WEBP"
    sheet = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    assert sheet.shape[1] == 3 * CELL  # 5 records: a 3 x 2 grid


@pytest.mark.parametrize("flag", ["--n", "-n"])
def test_the_count_of_records_is_taken_as_n_or_as_the_short_flag(out, tmp_path, flag):
    result = _preview(str(out), flag, "2", "--out", str(tmp_path / "sheet.png"))
    assert result.returncode == 0, result.stderr
    assert cv2.imread(str(tmp_path / "sheet.png")).shape[1] == 2 * CELL  # 2 records: 2 x 1


def test_the_count_is_spelled_n_in_help_and_errors(out: Path, tmp_path: Path):
    """Help showed `-n, --n N` and a bad count was "Invalid value for '--n' / '-n'": a flag
    no user typed. --n is still taken (above), unshown."""
    assert " -n N " in _preview("--help").stdout and "--n" not in _preview("--help").stdout
    said = _preview(str(out), "-n", "x", "--out", str(tmp_path / "x.png")).stderr
    assert "Invalid value for '-n': 'x'" in said and "--n" not in said


def test_more_records_asked_for_than_the_split_holds_shows_them_all_and_says_so(out, tmp_path):
    """preview -n 50 of a split of 5 drew the 5 and said nothing: one line says the split holds
    only 5; a count it holds says nothing more."""
    result = _preview(str(out), "-n", "50", "--out", str(tmp_path / "sheet.png"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"wrote {tmp_path / 'sheet.png'}",
        "split 'train' holds only 5 records: the sheet shows all of them, not 50",
    ]
    assert cv2.imread(str(tmp_path / "sheet.png")).shape[1] == 3 * CELL  # 5 records: 3 x 2
    result = _preview(str(out), "-n", "5", "--out", str(tmp_path / "five.png"))
    assert result.stdout.splitlines() == [f"wrote {tmp_path / 'five.png'}"], result.stderr
    from shardpack import Preview, make_preview

    drawn = make_preview(out, tmp_path / "api.png", n=50)
    assert drawn == Preview(str(tmp_path / "api.png"), "train", 5)
    assert os.fspath(drawn) == str(tmp_path / "api.png")  # the path, as it returned before
    assert drawn.short_of(5) is None and "only 5 records" in drawn.short_of(6)


def test_a_dataset_without_train_is_drawn_from_its_first_split(tmp_path: Path):
    """A COCO set of `val` alone (a split tree here): no --split needed, and one naming no
    split says which there are."""
    out = packed_tree(tmp_path, {"val/a": 2, "val/b": 1, "test/a": 1}, workers=1)
    result = _preview(str(out), "--out", str(tmp_path / "sheet.png"))
    assert result.returncode == 0, result.stderr
    sheet = cv2.imread(str(tmp_path / "sheet.png"), cv2.IMREAD_COLOR)
    assert sheet.shape[1] == 1 * CELL  # test's one record, the first split by name
    result = _preview(str(out), "--out", str(tmp_path / "v.png"), "--split", "train")
    assert result.returncode == 2 and "no split 'train'; it has test, val" in result.stderr


@pytest.mark.parametrize("name, said", [("sheet.gif", ".gif"), ("sheet", "without extension")])
def test_another_extension_is_refused_in_one_line(out: Path, tmp_path: Path, name, said):
    result = _preview(str(out), "--out", str(tmp_path / name))
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert name in line and said in line and ".png, .jpg, .jpeg, .webp" in line
    assert not (tmp_path / name).exists()


def test_a_missing_folder_for_the_sheet_is_named(out: Path, tmp_path: Path):
    dest = tmp_path / "no-such-folder" / "sheet.png"
    result = _preview(str(out), "--out", str(dest))
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert f"folder {dest.parent} does not exist" in line and "--resume" not in line


def test_a_folder_or_a_missing_folder_for_out_is_named_for_preview_and_report(
    out: Path, tmp_path: Path
):
    """`--out reports` (a folder) was 'a file without extension'; report's missing folder was
    'cannot write the report (No such file or directory); check the path'."""
    (tmp_path / "reports").mkdir()
    for command, name in (("preview", "preview.png"), ("report", "report.html")):
        done = run_cli(command, str(out), "--out", str(tmp_path / "reports"))
        assert done.returncode == 2
        assert done.stderr.splitlines() == [
            f"error: {tmp_path / 'reports'}: is a folder; --out names the file to write, such as "
            f"{tmp_path / 'reports' / name}"
        ]
        dest = tmp_path / "no-such-folder" / f"x.{name.split('.')[1]}"
        done = run_cli(command, str(out), "--out", str(dest))
        assert done.returncode == 2
        assert done.stderr.splitlines() == [
            f"error: {dest}: folder {dest.parent} does not exist; create it, or write elsewhere"
        ]
    assert list((tmp_path / "reports").iterdir()) == []


def test_an_out_a_shell_left_as_it_was_is_refused_for_preview_and_report(
    out: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """--out '' was refused as 'a file without extension' (preview) or 'cannot write' (report),
    naming no flag; a quoted '~/x.png' was a file under a folder named '~' here."""
    from shardpack.errors import OutputError
    from shardpack.read.preview import make_preview
    from shardpack.read.report import write_report

    monkeypatch.chdir(tmp_path)
    (tmp_path / "~").mkdir()  # where a quoted ~ would have written
    for write in (make_preview, write_report):
        with pytest.raises(OutputError, match=r"^--out is an empty string \(''\); pass an "):
            write(out, "")
        with pytest.raises(OutputError, match=r"^--out '~/x' starts with '~', which only a "):
            write(out, "~/x")
    assert not any((tmp_path / "~").iterdir())


def test_a_file_at_the_sheet_name_is_kept_unless_overwrite(out: Path, tmp_path: Path):
    """A photo of the user's named like the sheet is refused in one line and kept (a link too,
    never written through); --overwrite replaces it."""
    mine = tmp_path / "photo.jpg"
    mine.write_bytes(b"my holiday")
    result = _preview(str(out), "--out", str(mine))
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert f"{mine}: exists; pass --overwrite" in line and mine.read_bytes() == b"my holiday"
    link = tmp_path / "sheet.png"
    link.symlink_to(mine)
    assert _preview(str(out), "--out", str(link)).returncode == 2 and link.is_symlink()
    assert _preview(str(out), "--out", str(mine), "--overwrite").returncode == 0
    assert mine.read_bytes().startswith(MAGIC[".jpg"])
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


def test_the_sheet_never_replaces_a_file_made_while_it_was_drawn(out, tmp_path, monkeypatch):
    """A file that appears at --out while the records are read (after the first check) is
    kept, and the run refused in the same words."""
    from shardpack.errors import OutputError
    from shardpack.read import preview

    dest = tmp_path / "sheet.png"
    reading = preview.iter_examples

    def arriving(*args, **kwargs):
        dest.write_bytes(b"arrived first")  # as another program would, mid-run
        yield from reading(*args, **kwargs)

    monkeypatch.setattr(preview, "iter_examples", arriving)
    with pytest.raises(OutputError, match=f"{dest}: exists; pass --overwrite"):
        preview.make_preview(out, dest)
    assert dest.read_bytes() == b"arrived first" and [p.name for p in tmp_path.iterdir()] == [
        "sheet.png"]  # fmt: skip


def test_without_hard_links_the_sheet_still_goes_only_where_nothing_is(tmp_path, monkeypatch):
    """On a filesystem without hard links (FAT, some network ones: link() fails with EPERM) a
    new file still appears, complete; an existing one is still kept."""
    import errno

    from shardpack.storage import atomic

    def no_links(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(atomic.os, "link", no_links)
    dest = tmp_path / "sheet.png"
    atomic.write_atomic(str(dest), b"sheet", new=True)
    assert dest.read_bytes() == b"sheet"
    with pytest.raises(FileExistsError):
        atomic.write_atomic(str(dest), b"another", new=True)
    assert dest.read_bytes() == b"sheet" and [p.name for p in tmp_path.iterdir()] == ["sheet.png"]


def test_a_url_for_the_sheet_is_refused_in_one_line(out: Path):
    result = _preview(str(out), "--out", "s3://bucket/grid.png")
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "s3://bucket/grid.png: preview writes a local image file" in line


def _colour_at(sheet: np.ndarray, colour: tuple) -> np.ndarray:
    return (sheet == np.array(colour, np.uint8)).all(axis=2)


def test_objects_are_drawn_with_class_names_and_mask_outlines(objects_out: Path, tmp_path: Path):
    """a.png (40 x 60) fills the first cell as an 85 x 128 thumbnail: its cat box, named, and
    the outline of the cat's mask (pixels [8, 20) x [10, 26) of the image) inside it."""
    from shardpack.read.preview import BOX_COLOR, MASK_COLOR, make_preview

    sheet = cv2.imread(make_preview(objects_out, tmp_path / "sheet.png"), cv2.IMREAD_COLOR)
    cell = sheet[:85, :CELL]
    # the cat box [0.1, 0.1, 0.6, 0.5]: corners at (x, y) = (13, 8) and (64, 50) of the cell
    box = _colour_at(cell, BOX_COLOR)
    assert box[50, 13:65].all() and box[20:51, 13].all() and box[20:51, 64].all()
    assert not box[20:48, 15:62].any()  # an outline, not a filled box
    # its name: dark text on a strip of BOX_COLOR at the top left corner
    strip = cell[9:17, 14:34]
    assert _colour_at(strip, BOX_COLOR).sum() > 40 and (strip.max(axis=2) < 100).sum() > 5
    # the mask outline: the id-1 region scaled by 128 / 60, nearest-neighbour
    ys, xs = np.nonzero(_colour_at(cell[:, :64], MASK_COLOR))
    assert abs(ys.min() - 8 * 128 / 60) <= 1.5 and abs(ys.max() - 20 * 128 / 60) <= 1.5
    assert abs(xs.min() - 10 * 128 / 60) <= 1.5 and abs(xs.max() - 26 * 128 / 60) <= 1.5
    # c.png has no objects: nothing drawn on its cell (the second row's first)
    empty = sheet[CELL + 22 : CELL + 22 + CELL, :CELL]
    assert not _colour_at(empty, BOX_COLOR).any() and not _colour_at(empty, MASK_COLOR).any()


def test_a_label_list_out_of_step_with_the_boxes_draws_them_unnamed(tmp_path: Path):
    """verify names that fault; preview still draws the boxes, without names, not a traceback."""
    from shardpack.read.preview import BOX_COLOR, make_preview
    from tests.helpers import OBJECT_ROWS, pack_objects

    out = pack_objects(
        tmp_path, [{**OBJECT_ROWS[0], "labels": [1], "is_crowd": [0]}], unequal_lists=True
    )
    sheet = cv2.imread(make_preview(out, tmp_path / "sheet.png"), cv2.IMREAD_COLOR)
    strip = sheet[9:17, 14:34]
    assert _colour_at(sheet, BOX_COLOR)[50, 13:65].all() and (strip.max(axis=2) < 100).sum() == 0


def test_an_accented_class_name_is_drawn_without_its_accents(tmp_path: Path):
    """Crème Brûlée's sheet is Creme Brulee's, not one captioned Cr?me Br?l?e (OpenCV's
    font draws ASCII alone)."""
    sheets = []
    for name in ("Crème Brûlée", "Creme Brulee"):
        out = packed_tree(tmp_path / name, {name: 1}, workers=1)
        assert _preview(str(out), "--out", str(out / "grid.png")).returncode == 0
        sheets.append(cv2.imread(str(out / "grid.png")))
    assert np.array_equal(*sheets)


@pytest.mark.slow
def test_a_ctrl_c_as_opencv_loads_stops_the_preview(out: Path, tmp_path: Path):
    """shardpack.read.preview imported OpenCV at its top, outside stops_held: a Ctrl-C as the
    preview started was swallowed by OpenCV's loader, and it drew the sheet, exit 0."""
    sheet = tmp_path / "sheet.png"
    run = ctrl_c_as_opencv_loads("", "preview", str(out), "--out", str(sheet))
    assert run.returncode == 130 and not sheet.exists(), run.stdout + run.stderr
