"""vrh: find, prove and characterize Visual Retrieval Heads (VRHs) in vision-language models.

Conventions (stated once, used everywhere):

* A head is ``(layer, head)``, both 0-based, ``layer`` indexing the language model's decoder layers and
  ``head`` the query heads of that layer's self-attention (query heads, not KV heads under GQA).
* A score map is a tensor (or nested list in JSON) of shape ``[L, H]``: ``scores[layer, head]``.
* Boxes are ``(x1, y1, x2, y2)`` in pixels of the *original* image unless a name says otherwise.
* Captured attention rows are ``[layer, head, query, key]`` per sample.
"""

__version__ = "0.1.0"
