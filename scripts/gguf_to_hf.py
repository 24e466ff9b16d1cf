"""Turn a GGUF causal language model into a Hugging Face folder `transformers serve` can load.

`transformers serve` cannot serve the GGUF file itself (the config it reads from the file has no
architectures), so tests and benches convert the packaged SmolLM2 once and keep the folder.
Run with the transformers runtime's Python (it needs torch, transformers and gguf):

    var/runtimes/transformers/bin/python scripts/gguf_to_hf.py FILE.gguf OUT_DIR

The weights are dequantised to float32: on a CPU without bfloat16 units that is the fast path.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def convert(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.monotonic()
    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = model.config
    # The tensors are already dequantised at load; only the GGUF marks remain, and they make
    # save_pretrained refuse. Saved as a plain checkpoint, with the class the server
    # instantiates named in the config, which GGUF's own metadata never does.
    model.hf_quantizer = None
    if hasattr(model, "is_quantized"):
        model.is_quantized = False
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.architectures = [type(model).__name__]
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    if not tokenizer.chat_template:
        raise SystemExit(f"{gguf}: the converted tokenizer has no chat template; chat would fail")
    print(
        f"converted {gguf.name} ({sum(p.numel() for p in model.parameters()):,} parameters, "
        f"{config.architectures[0]}) to {out} in {time.monotonic() - started:.1f} s"
    )


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    convert(Path(sys.argv[1]).resolve(), Path(sys.argv[2]))
