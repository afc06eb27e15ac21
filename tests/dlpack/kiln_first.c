/* kiln.h first, then upstream dlpack.h: the second include must add nothing and conflict with
 * nothing. */
#include "kiln.h"
#include <dlpack/dlpack.h>

int kiln_first_tu(void) {
  DLManagedTensor m = {0};
  m.dl_tensor.ndim = 2;
  return (int)sizeof(DLTensor) + (m.dl_tensor.ndim - 2);
}
