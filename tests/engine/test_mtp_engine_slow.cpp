// Slow: greedy MTP drafting at depths 1..4 is token-identical to no drafting on six sample invoices.
#include "mtp_lossless.hpp"

namespace quarry::engine {
namespace {

TEST(MtpEngineSlow, GreedyIsLosslessOnSampleInvoicesAllDepths) {
  check_default_model_lossless({"en-txt-1.txt", "en-txt-2.txt", "de-txt-1.txt", "de-txt-2.txt", "hu-txt-1.txt",
                                "hu-txt-2.txt"},
                               {1, 2, 3, 4});
}

}  // namespace
}  // namespace quarry::engine
