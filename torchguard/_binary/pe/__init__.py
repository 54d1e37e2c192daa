"""Portable Executable (Windows DLL/PYD/EXE) images: headers, sections, symbols."""
