"""What torch tells a capture under each allocator backend: run once per backend
(PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync or unset) on a GPU machine; prints one JSON line.
The capture's handling of cudaMallocAsync is built on what this reports."""

import json

import torch

try:
    import torch.cuda._gpu_trace as t
    prefix = "register_callback_for_"
    activate = getattr(torch._C, "_activate_gpu_trace", None)
except ImportError:
    import torch.utils._cuda_trace as t
    prefix = "register_callback_for_cuda_"
    activate = getattr(torch._C, "_activate_cuda_trace", None)
seen = {"alloc": [], "free": []}
getattr(t, prefix + "memory_allocation")(lambda p: seen["alloc"].append(p))
getattr(t, prefix + "memory_deallocation")(lambda p: seen["free"].append(p))
if activate is not None:
    activate()
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
