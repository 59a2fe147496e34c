"""A seeded, structure-aware fuzzer of ``tw.Decoder`` against a live victim process.

It starts from valid messages of the built-in types, mutates them structurally (header, frame 0's
data, buffer table, handles, descriptors, body) and byte by byte, and decodes them in worker processes
(each frame 0 also read as ``tensorwire inspect`` reads it), while a separate victim process owns
the segments, decoys and fds the forged handles point at. It
reports crashes (isolated to their input), exceptions that are no ``CodecError``, harmed victim
targets, leaked segments and fds, and peak memory; failing inputs are saved as replayable case
files. ``python -m tools.fuzz --help``; modules: ``cases`` (generation), ``victim``, ``worker``,
``runner``, ``case`` (the case file), ``materialize`` (binding a case to a live run).
"""

from tools.fuzz.report import Report
from tools.fuzz.runner import Config, run

__all__ = ["Config", "Report", "run"]
