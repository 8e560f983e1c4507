"""What the bytes of each format mean, with no policy: ELF (:mod:`~fatbinkit.formats.elf`, the
reader; :mod:`~fatbinkit.formats.elf_writer`, relocatable objects;
:mod:`~fatbinkit.formats.elf_edit`, section and segment surgery), COFF objects for Windows
(:mod:`~fatbinkit.formats.coff`, the writer), ``ar`` archives, fatbin containers, cubins and
their ``.nv.info`` records, PTX headers and GPU archs; AMD's clang offload bundles
(:mod:`~fatbinkit.formats.offload_bundle`) and LLVM's OffloadBinary
(:mod:`~fatbinkit.formats.offload_binary`), AMDGPU code objects
(:mod:`~fatbinkit.formats.hsaco`) and AMD GPU target IDs (:mod:`~fatbinkit.formats.amdgpu`); the
compression of device-code payloads, with its bomb guards, apart from any one container
(:mod:`~fatbinkit.formats.codec`); the wrapper records through which a host program registers
its containers (:mod:`~fatbinkit.formats.wrapper`).

The operations above (:mod:`fatbinkit.scan`, :mod:`fatbinkit.slim`, :mod:`fatbinkit.compat`...)
work through these modules; nothing here imports an operation.
"""
