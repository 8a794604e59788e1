/* Type promotion: the dtype an elementwise op computes in, for torch and for numpy 2. */
#ifndef SJ_PROMOTE_H
#define SJ_PROMOTE_H

#include "rules.h"

/* The common dtype of two concrete dtypes (no Python scalars involved). Returns 0, or -1
 * with err set when the library has no common type. */
int promote_pair(Lib lib, DType a, DType b, DType *out, ShapeErr *err);

/* The result dtype of an elementwise op over its operands: BA_TENSOR values and Python
 * bool/int/float/complex constants (weak in both libraries; numpy scalars and 0-d arrays
 * arrive as BA_TENSOR and are strong in numpy 2). NULL entries and absent arguments are
 * skipped. check_range: numpy refuses a Python int that does not fit the result integer
 * type (arithmetic raises OverflowError; comparisons do not). *all_weak is set when no
 * operand was a tensor (may be NULL). Returns 0 or -1 with err set. */
int promote_args(Lib lib, const BoundArg *const *args, int n, int check_range, DType *out, int *all_weak,
                 ShapeErr *err);

/* The floating dtype an op that needs floats computes integer or bool input in: torch's
 * default float, or numpy's smallest float that holds the input exactly (int8 -> float16,
 * int16 -> float32, int32/int64 -> float64). Float and complex dtypes map to themselves. */
DType promote_to_float(Lib lib, DType d);

/* complex64/complex128 -> float32/float64; others unchanged. */
DType promote_real_of(DType d);

#endif
