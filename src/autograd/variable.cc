// placeholder replaced by the autograd layer in this session
namespace strata {}
