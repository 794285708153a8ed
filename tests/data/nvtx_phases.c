/* A CPU program with NVTX ranges, for the timeline tests (tests/test_nsys.py): two phases in push/pop ranges, one
   nested, a start/end range and a range of a named domain. NVTX 3 is header-only: cc -I<nsys>/target-linux-x64/nvtx/include
   nvtx_phases.c -ldl. Without a tool attached every call is a no-op. */
#include <nvtx3/nvToolsExt.h>
#include <time.h>

static void work(long ms) {
  struct timespec t = {0, ms * 1000000L};
  nanosleep(&t, 0);
}

int main(void) {
  nvtxRangePushA("load");
  work(20);
  nvtxRangePushA("parse");
  work(10);
  nvtxRangePop();
  nvtxRangePop();
  nvtxRangeId_t r = nvtxRangeStartA("solve");
  work(30);
  nvtxRangeEnd(r);
  nvtxDomainHandle_t d = nvtxDomainCreateA("paper");
  nvtxEventAttributes_t a = {0};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = "report";
  nvtxDomainRangePushEx(d, &a);
  work(5);
  nvtxDomainRangePop(d);
  return 0;
}
