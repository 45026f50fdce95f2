"""Manifests: tables (CSV, TSV, JSONL, Parquet) of image paths, labels and typed values.

Modules: files (finding a manifest, naming its lines), chunks (opening one; rows as columns),
csv_reader, jsonl_reader and parquet_reader (a file's rows, a chunk at a time), columns (which
column is the path, label, split), cells (spellings and bounds of values), kinds (typing a
column from its values' kinds), convert (rows checked and converted) and reader (read_manifest).


A manifest names one image per row in its path column, optionally a `label` (a class name, an
integer, or a list of either for a multi-label dataset) and a `split`; every other column becomes
a feature of the same name, typed over the whole column:

- numbers: int64 when every value is an integer or a boolean, else float32;
- text: bytes holding UTF-8 (`Feature("bytes", text=True)`);
- lists (JSONL, Parquet): of numbers -> (-1,) int64/float32; of text -> (-1,) text; of k-long
  number lists (boxes, keypoints) -> (-1, k), stored flat.

The file is read twice, streaming: the first pass infers each column's type, the second converts
and checks every row. A row that cannot be stored (no path, a value of another type, a ragged box
list, an integer beyond int64) becomes a `BadRow` naming its line, for the caller's error policy;
a file that cannot be a manifest (or a number column with a missing value) raises `SourceError`.

Typing rules that make the same table give the same rows in every format:
- A CSV/TSV cell is read as JSON would read it: an integer when it is written like a JSON
  integer (`-?(0|[1-9][0-9]*)`, so `007` stays text), a float when written like a JSON number
  with a fraction or exponent (`2.0` is a float, as `json` and `pyarrow` read it) or as Python's
  or JSON's nan/inf, a boolean for true/false (any case). A column with any other cell is text,
  and then every cell is its text (CSV cannot tell a number from text that looks like one).
- In JSONL and Parquet a column is typed by its values, not by the file's declared types. Where
  values of different kinds meet (text and numbers, scalars and lists, boxes of 4 and of 5
  values), the column takes the kind most rows hold and the other rows are bad rows.
- Missing values (an empty CSV cell, a JSON null or absent key, a Parquet null): text -> "",
  a list -> empty, a single label -> a bad row. A number column missing a value anywhere (or a
  Parquet number column with no value at all) is refused before any row is converted: no number
  is made up, and a column that is optional in the file does not silently drop the rows that
  leave it out (a scalar feature holds one value in every record; see shardpack.schema).
"""
