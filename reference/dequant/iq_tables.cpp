// mlaconf reference: IQ / FP4 lookup tables (see iq_tables.h). Data transcribed from ggml-common.h.
#include "reference/dequant/iq_tables.h"

namespace mlaconf::ref::detail {

const int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
const int8_t kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

}  // namespace mlaconf::ref::detail
