"""Whole-buffer checkpoints: save any object graph with its arrays written raw, once.

save            write an object graph to a checkpoint file, atomically
BackgroundSave  what ``save(..., background=True)`` returns: ``wait()``, ``done()``
load            read a checkpoint, fully or memory-mapped, refusing pickle by default
inspect         describe a checkpoint from its header alone (a ``CheckpointInfo``)
CheckpointInfo  what ``inspect`` returns: printable tree plus attributes
FieldInfo       one stored array as ``inspect`` reports it
FORMAT_NAME     the value of the ``format`` metadata key
FORMAT_VERSION  the format version this package writes (independent of the package)

The package, one module per concern, on three floors (each module imports only those
listed before it; the upper floors import the plain one, never the reverse):

The plain format

* ``_header``: the format's constants and limits, JSON text with its value count
  bounded before parsing, the caller's metadata, CRC-32 helpers, file-kind sniffing,
  compressed blocks' chunk tables, and the typed header records with every check of
  untrusted header data (the trust boundary)
* ``_graph``: the object graph: tensor names, the table of arrays, folding, the node
  kinds (encode, parse, decode, describe), pickled leaves; a graph encoded as nodes,
  or pickled when allowed
* ``_storage``: arrays copied out of a read-only map a piece at a time, which pages
  of memory were written since read from a file (Linux), block I/O (chunked writes
  with CRC-32 and fdatasync, reads, maps), arrays grouped into blocks and placed
* ``_compression``: the ``compression=`` argument; compressed blocks written from a
  thread pool, read, verified and decompressed into their destination chunk by chunk
  (imported only by a save that compresses and a file that holds compressed blocks)
* ``_write``: the atomic file writer (mode kept, symlinks followed) and the stale
  temporary file reaper; what a save or read of a path waits for (this process's
  background save of it, another's incremental save); disk-space checks; the one
  full-file writer and its layout policies (``PLAIN``; ``PAGE_ALIGNED`` for files that
  incremental saves update in place; placed chunk tables for compressed ones)
* ``_save``: ``save``, and the check for the journal an interrupted incremental save
  left (one ``lstat``; ``_incremental`` is loaded only to settle one)
* ``_read``: opening an untrusted file (regular files only, never blocking), ``load``,
  ``inspect`` (``CheckpointInfo``, ``FieldInfo``) and ``verify``
* ``inspector``: the old module path of ``CheckpointInfo`` and ``FieldInfo``, kept
  for objects pickled before

Incremental saves

* ``_tracking``: pages watched for writes, the byte ranges in-place saves rewrote
  (for check-resume's audit digests), what the last save of each file wrote, and the
  changed ranges of each block
* ``_incremental``: ``save(..., incremental=True)``: the redo journal, relayout of
  blocks that changed size, came or went, in-place updates, recovery at load
* ``_squeezed``: in-place updates of compressed files, chunk by chunk

Background saves

* ``_background``: ``save(..., background=True)``: the snapshot child's forker and
  the writer thread

Plain saves and loads of files without a journal load none of the incremental and
background floors, nor ``_compression`` for uncompressed files; ``load`` loads
``evolution`` only with ``schemas=``.

File format, version 1.0
------------------------

A checkpoint saved without compression is a valid `safetensors
<https://github.com/huggingface/safetensors>`_ file (one with compressed
blocks is not: see "Compressed blocks")::

    8 bytes     little-endian unsigned header length N
    N bytes     UTF-8 JSON header, padded with spaces so that 8 + N is a
                multiple of 64
    data        the blocks, back to back (in header order, except in files that an
                incremental save relaid: see "Incremental saves")

The header maps tensor names to ``{"dtype", "shape", "data_offsets"}``
(offsets relative to the data section, contiguous, in order, without holes,
as safetensors requires) and has a ``__metadata__`` object of strings:

``format``
    ``"namedschema.checkpoint"``. Files without it are not checkpoints, even
    when they are valid safetensors files written by other tools.
``format_version``
    ``"MAJOR.MINOR"``. Readers accept any minor version of the major versions
    they know; a file whose features they do not know is refused (below).
``header_crc32``
    eight hex digits: CRC-32 of the raw header bytes with this value replaced
    by ``00000000``. Any change to the header is detected on every load.
``namedschema``
    the description, a JSON object:

    ``blocks``: one entry per stored block of memory,
    ``{"tensor": name, "nbytes": n, "crc32": "8 hex digits"}``. A block is the
    span of memory that a group of arrays share (arrays are grouped when they
    view one base array or overlap in memory), stored once. When a block holds
    exactly one array in C (or Fortran) order with a dtype safetensors knows,
    the tensor is declared with that dtype and shape (the reversed shape for
    Fortran order), so safetensors readers get the array itself; otherwise it
    is declared ``U8`` with shape ``[nbytes]``. A block holding one sparse
    view (more than half of its span unused) stores a C-order copy of the
    view's elements. Tensors named ``__pad__.K`` are zero padding that keeps
    every block 64-byte aligned in the file.

    ``arrays``: one entry per array object,
    ``{"block", "offset", "shape", "strides", "dtype", "path"}`` plus, for
    torch tensors, ``"torch": dtype name`` and ``"requires_grad"``. ``dtype``
    is numpy's ``dtype.str`` and must be one of the bool, integer, float and
    complex types in ``_header.ALLOWED_DTYPES`` (either byte order). Every
    array is rebuilt as a view ``np.ndarray(shape, dtype, buffer=block,
    offset=offset, strides=strides)``, so arrays that shared memory share it
    again. An empty array has ``"block": null``.

    ``schemas``: ``{"kind", "typename", "fields", "id", "defaults",
    "module"}`` for each schema (``kind`` is ``NamedTupleSchema`` or
    ``NamedArrayTupleSchema``; ``defaults`` are structure nodes that refer to
    no array or schema). Loading rebuilds them through the pickle registry, so
    one ``id`` is one class per process. A stdlib namedtuple is recorded as a
    ``NamedTupleSchema`` with an id derived from its definition; an rlpyt
    namedarraytuple class as a ``NamedArrayTupleSchema``.

    ``structure``: the object graph as a node, or ``null`` when pickled. The
    node kinds (``_graph.KINDS``, in this order):

    * JSON ``null``/``true``/``false``/numbers/strings: None, bool, int, float, str
    * ``{"float": "nan"|"inf"|"-inf"}``: a float that is not finite
    * ``{"list": [node, ...]}``: a list
    * ``{"tuple": [node, ...]}``: a tuple
    * ``{"dict": [[key, node], ...]}``: a dict with str keys, in order
    * ``{"array": i}``: entry ``i`` of ``arrays`` (a numpy array or torch
      tensor; one object stored once is one object after loading)
    * ``{"scalar": i}``: a numpy scalar (``np.float32(1.5)``), stored as the
      0-d array ``i`` of ``arrays`` and loaded as ``array[()]``
    * ``{"schema": s}``: the schema class ``s`` of ``schemas`` itself
    * ``{"nt": s, "values": [node, ...]}``: an instance of schema ``s`` (a
      schema, a stdlib namedtuple or an rlpyt namedarraytuple)
    * ``{"numpy": [dtype, shape, [value, ...]]}``: a numpy scalar (shape
      ``[]``) or array of at most 4096 elements held in the node, values in C
      order (``"nan"``/``"inf"``/``"-inf"`` for such floats, ``[re, im]`` for
      complex); used for schema defaults such as ``np.float32(0)``, which
      declare a dtype, and listed as the feature ``"numpy-defaults"``

    A node object has exactly the keys shown. The data path keeps array
    identity but not container identity: a list that appears twice comes back
    as two equal lists. Subclasses of the builtin types (an ``IntEnum``, a
    ``str`` subclass) are not data.

    ``pickle``: ``null``, or ``{"block": b, "reason": text}`` when the graph
    holds objects that are not data (saved with ``allow_pickle=True``). Block
    ``b`` then holds a protocol-5 pickle of the whole graph whose arrays are
    persistent references ``("array", i)`` into ``arrays``; pickle keeps all
    identity. ``load`` refuses such files unless ``allow_pickle=True``.

    ``features``: names of optional features the file uses; a reader must
    refuse a file listing a feature it does not know. Version 1.0 writes
    ``[]``, or ``["numpy-defaults"]`` when a schema default is a ``numpy``
    node (readers before that feature refuse such files instead of
    misreading them), plus ``"zstd-chunks"`` when a block is compressed
    (below).

    ``checkpoint_id`` (random hex, new at every save) and ``parent``
    (``null``, reserved).

    ``metadata`` (optional): the caller's ``save(..., metadata=)``, an
    object of at most 64 string pairs (keys up to 200 characters, values up
    to 10,000), plain data that says what the file is without loading it
    (``load(..., expect_metadata=)`` refuses a file that lacks the expected
    pairs before reading data or unpickling). Readers that do not know it
    ignore it.

    ``saved`` (optional, written by incremental-mode saves): what the save
    that made the current state wrote, ``{"kind": "full"|"incremental",
    "bytes_written", "ranges", "data_bytes"}``. Readers that do not know it
    ignore it.

Compressed blocks (``save(..., compression="zstd")``). Blocks of at least
4 KiB are stored as chunks; smaller ones (and every block of a file saved
without compression) exactly as above. A compressed block's entry in
``blocks`` has three more keys::

    {"tensor": name, "nbytes": n, "crc32": "8 hex digits",
     "codec": "zstd", "chunk": c, "chunks": [[s0, "8 hex digits"], ...]}

``nbytes`` is the block's raw size and ``crc32`` the CRC-32 of its raw
bytes, as for any block. The raw bytes are cut into ``ceil(n / c)`` chunks
of ``c`` bytes (the last one ``n - (k - 1) * c``; the writer uses
``c = 4 MiB``), each stored independently, back to back: chunk ``i`` takes
``s_i`` bytes of the file, with the CRC-32 of those stored bytes. A chunk
whose ``s_i`` equals its raw size is stored raw; a smaller one is a single
zstd frame (RFC 8878, content size in its header, no dictionary) that
decompresses to exactly its raw size. The writer stores a chunk raw when
compressing it does not make it smaller, so incompressible data costs its
own size plus its chunk table. The block's tensor is declared ``U8`` with
shape ``[sum of s_i]``, so the tensor table still tiles the data section;
its padding follows as for any block. A reader checks, before reading or
allocating anything for the block: ``codec`` is known; ``64 <= c <= 64 MiB``;
the table has exactly ``ceil(n / c)`` entries, no more than the stored
bytes; every ``s_i`` is between 1 and its chunk's raw size, and the raw size
is at most 32,768 times ``s_i`` (no zstd frame expands more: a file cannot
make a load allocate more than that times its size); the ``s_i`` add up to
the tensor's size (without ``offsets``, below); the file lists the feature ``"zstd-chunks"``.
A table may also list ``"raw_crc32": ["8 hex digits", ...]``, the CRC-32 of each
chunk's raw bytes (exactly one per chunk, eight lower-case hex digits; the file then
lists the feature ``"zstd-chunk-raw-crcs"``, which readers before it refuse);
``verify`` checks each against the chunk's decompressed bytes. Loading
decompresses each chunk into the block's memory (raw chunks are read into
it); a frame that declares or yields another size than its chunk's is a
``FormatError`` naming the block's first field. Every load checks the
CRC-32 of each compressed chunk; ``verify=True`` and ``namedschema verify``
also check the raw chunks' CRC-32 and the CRC-32 of the decompressed block. Such a file is not a valid safetensors file in any
useful sense: safetensors readers see the compressed blocks as ``U8``
tensors of zstd frames, not as the arrays, and readers before the feature
refuse it. A compressed block cannot be memory-mapped (``load`` with
``mmap_mode`` refuses the file, naming the field).

Placed chunks (``save(..., incremental=True, compression="zstd")``). A chunk
table may have one more key, ``"offsets": [o0, o1, ...]``: chunk ``i`` is then
stored at ``o_i`` bytes into the block's tensor, and the tensor also holds free
space (the stored sizes add up to at most its size). A reader checks that there
is one integer offset per chunk, that every chunk lies inside the tensor, that no
two overlap, and that the file lists the feature ``"zstd-chunk-offsets"``
(readers before it refuse such a file). Incremental compressed saves write every
block of at least 4 KiB, and the pickle block, this way (with ``raw_crc32``), each
tensor with room for
its chunks to grow (a quarter of their size, and at least two chunks' raw size or
an eighth of the block, whichever is less), and the header with room to grow as
in other incremental-mode files. A later save rewrites only the chunks whose data
changed, through the journal: where the chunk was if its new stored size fits
there, else in free space of the tensor, else the block's chunks are packed again,
else the block moves (to free padding or the end of the file, with half as much
again as it needs) and its old place is zeroed and becomes ``__pad__.K``. It
updates the chunk's entry and offset, and the block's ``crc32`` (the CRC-32 of its
raw bytes, combined from the chunks'); a save that would leave more padding than
half of the blocks' tensors (plus 8 MiB) is a full save instead, which packs the
file. A save in a process that did not write the file's current state compares each
chunk of memory with its ``raw_crc32`` (used only where the listed checksums combine
to the block's ``crc32`` and equal the stored checksum of every raw chunk) and
rewrites the chunks that differ. Files written without ``incremental`` (and all uncompressed files) have no
``offsets`` and are exactly as before.

Incremental saves (``save(..., incremental=True)``) write files of this same
format, with two layout choices any 1.x reader accepts: blocks of at least
64 KiB start at the page offset (mod 4096) their memory had, so that file and
memory pages coincide (the padding before them is a ``__pad__.K`` tensor, and
may be a hole in the file), and the header has room to grow (trailing spaces:
as much again as the header, at least 64 KiB) so that it can be rewritten in place; a pickle block is followed by padding it
may grow into. A later incremental save changes bytes of the file in place,
through a redo journal ``.<name>.journal`` next to it: the journal (ranges,
their CRC-32s, the new header, an end marker) is written and synced before any
byte of the file changes, and whoever opens the file next (``save``,
``load``) writes a complete journal's ranges again, syncs the file and
removes the journal; an incomplete one is removed. When blocks changed size,
appeared or went (or the pickle outgrew its room), the save keeps the blocks
that did not in place and rewrites the others whole, where they were if they
still fit, else in free padding, else appended (the journal then records the
larger file size, and a replay extends the file first); bytes given back are
zeroed and become ``__pad__.K`` tensors. The tensor table then lists blocks
out of header order, which the format allows (offsets tile the data section;
safetensors sorts them too): no new feature, and files whose blocks did not
change size are written exactly as before. Block checksums stay
CRC-32s of whole blocks: they are updated from the changed ranges alone (CRC
is affine over GF(2)), so ``verify=True`` checks files from both kinds of save
alike. While changing the file the saver holds an exclusive ``flock`` on it;
``load`` holds a shared one while it reads.

Writing. ``save`` writes ``.<name>.tmp-<host>-<pid>-<random>`` in the
target's directory (``<name>`` is the target's file name, or its first 40
characters, ``~`` and a hash when it is longer than 200 bytes; ``<host>`` is
eight hex digits of a hash of the host name and pid namespace, ``<pid>`` the
saver's process id), fills it, syncs it, renames it over the target and syncs
the directory, so the target always holds a complete checkpoint. A saver that
is killed leaves its temporary file behind; before writing, every later save
to the same target removes such files, and only those whose name carries its
own ``<host>`` and whose ``<pid>`` is no longer writing: no process has that
pid, or it is a zombie, or it started more than 10 seconds after the file was
last modified (the pid was reused). Whatever cannot be decided (no ``/proc``,
files of other hosts, other targets, anything not a regular file) is kept.

Trust. ``load`` checks the length prefix, the header checksum, every dtype
against the allowlist (object, structured and string dtypes are never made
from file bytes), every shape against numpy's size limit (the itemsize times
the product of the nonzero dimensions must fit in ``intp``, for empty arrays
too), every shape, stride and offset against its block, and every block
against the real file size, before anything is allocated or mapped.
Data checksums are checked with ``verify=True``. Before parsing, the header
and the description may hold at most ``MAX_JSON_VALUES`` (4,000,000) JSON
values, counted on their bytes; a tensor entry or array at most 64
dimensions; a schema, and all the schemas of a file together, at most
100,000 fields. Block checksums are exactly eight lower-case hex digits. A
torch entry's strides are non-negative multiples of its element size, and
only floating point and complex tensors may have ``requires_grad``. Only
regular files are opened (without blocking). Alignment: every block starts at
a multiple of 64 in the file and is read to such an address in memory; a
block whose saved span started past a multiple of its largest item size
begins with that many zero bytes, so arrays keep their alignment, and a
tensor whose address is not a multiple of its element size (torch's
requirement) is loaded as an aligned copy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._header import FORMAT_NAME, FORMAT_VERSION
from ._read import CheckpointInfo, FieldInfo, inspect, load, verify
from ._save import save

if TYPE_CHECKING:
    from ._background import BackgroundSave
else:
    def __getattr__(name: str) -> Any:
        """``BackgroundSave`` loads ``background`` on first use: plain saves never need it."""
        if name == "BackgroundSave":
            from ._background import BackgroundSave
            globals()[name] = BackgroundSave
            return BackgroundSave
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["save", "load", "inspect", "verify", "BackgroundSave", "CheckpointInfo",
           "FieldInfo", "FORMAT_NAME", "FORMAT_VERSION"]
