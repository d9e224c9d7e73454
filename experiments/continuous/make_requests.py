"""requests-256.jsonl: the 128 mixed-length prompts of experiments/gpu/mixed-128.jsonl, twice (ids -a / -b), as the
concurrency sweep's 256 requests.   python experiments/continuous/make_requests.py"""

import json
from pathlib import Path

here = Path(__file__).parent
prompts = [json.loads(line) for line in (here.parent / "gpu" / "mixed-128.jsonl").read_text().splitlines()]
with (here / "requests-256.jsonl").open("w") as f:
    for copy in "ab":
        for p in prompts:
            f.write(json.dumps({**p, "id": f"{p['id']}-{copy}"}) + "\n")
