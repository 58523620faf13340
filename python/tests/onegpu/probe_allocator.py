"""What torch tells a capture under each allocator backend: run once per backend
(PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync or unset) on a GPU machine; prints one JSON line.
The capture's handling of cudaMallocAsync is built on what this reports."""

import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from shardcheck.capture.hooks import register_trace_callback  # noqa: E402

seen = {"alloc": [], "free": []}
register_trace_callback("memory_allocation", lambda p: seen["alloc"].append(p))
register_trace_callback("memory_deallocation", lambda p: seen["free"].append(p))
a = torch.empty(1 << 20, device="cuda")
pa = a.data_ptr()
s = a.untyped_storage()
ref = s._weak_ref() if hasattr(s, "_weak_ref") else None
del s
del a
expired = torch.UntypedStorage._expired(ref) if ref is not None else None
b = torch.empty(1 << 20, device="cuda")
torch.cuda.synchronize()
print(json.dumps({"backend": torch.cuda.get_allocator_backend(), "alloc_callbacks": len(seen["alloc"]),
                  "free_callbacks": len(seen["free"]), "weak_ref": ref is not None,
                  "expired_after_del": expired, "same_address_again": b.data_ptr() == pa}))
