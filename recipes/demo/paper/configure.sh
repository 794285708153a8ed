# The demo paper's configure: writes config.mk for its Makefile.
#   bash configure.sh [--cuda ON|OFF] [--gencode "FLAGS"]
set -e
cuda=OFF gencode=""
while [ $# -gt 0 ]; do
  case $1 in
    --cuda) cuda=$2; shift 2 ;;
    --gencode) gencode=$2; shift 2 ;;
    *) echo "configure.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
{
  echo "WITH_CUDA := $cuda"
  echo "GENCODE := $gencode"
} > config.mk
echo "configured: CUDA $cuda${gencode:+ ($gencode)}"
