"""Our own GPU kernels, written in Triton: the `triton` implementation of the variants whose claim
needs structure (variants.triton.paths attaches them). One folder per kernel family, in the manner of
flash-linear-attention's `fla/ops/<family>/`: the kernels with their backward, a short naive
reference beside them, and an `__init__.py` of public exports.

    band/     each query block against the key blocks its band (or rectangle) reaches
    gather/   each query row against its own list of keys, gathered by index
    residue/  strided's residue classes: rows and keys m·l + r, by index arithmetic
    chunk/    linearized attention in chunks: intra-chunk quadratic, inter-chunk state
    union.py  the parts of one pattern, merged exactly by log-sum-exp; their backward

Importing this package imports no Triton (the registry imports it on every machine); `capability`
says where the kernels run, and the families import Triton when a `triton` path is prepared.
"""
