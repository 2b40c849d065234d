set -uo pipefail
export OUT
WORK=/tmp/ta-corpus bash scripts/gpu_corpus.sh torch strided_elementwise 2>&1 | grep -E "ms/step|packed|FAIL"
WORK=/tmp/ta-corpus bash scripts/gpu_corpus.sh nsys strided_elementwise 2>&1 | grep -E "ms/step|packed|FAIL|post"
