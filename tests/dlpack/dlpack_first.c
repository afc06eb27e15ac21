/* Upstream dlpack.h (0.x from Debian) first, then kiln.h: kiln adds only the 1.x declarations. */
#include <dlpack/dlpack.h>
#include "kiln.h"

int kiln_first_tu(void);

int main(void) {
  DLManagedTensorVersioned v = {0};
  DLTensor t = {0};
  t.device.device_type = kDLCUDA;
  v.dl_tensor = t;
  v.version.major = 1;
  return (kiln_first_tu() == (int)sizeof(DLTensor) && v.dl_tensor.device.device_type == kDLCUDA) ? 0 : 1;
}
