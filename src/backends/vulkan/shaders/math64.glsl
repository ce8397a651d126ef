/* math64.glsl — double overloads of math.glsl's m_NAME (only with USE_F64).
 * PLACEHOLDER: through float; being replaced by full double implementations. */
double m_copysign(double x, double s) {
    uvec2 a = unpackDouble2x32(x), b = unpackDouble2x32(s);
    return packDouble2x32(uvec2(a.x, (a.y & 0x7fffffffu) | (b.y & 0x80000000u)));
}
bool m_signbit(double x) { return (unpackDouble2x32(x).y & 0x80000000u) != 0u; }
double m_exp(double x) { return double(m_exp(float(x))); }
double m_log(double x) { return double(m_log(float(x))); }
double m_log1p(double x) { return double(m_log1p(float(x))); }
double m_expm1(double x) { return double(m_expm1(float(x))); }
double m_sqrt(double x) { return sqrt(x); }
double m_sin(double x) { return double(m_sin(float(x))); }
double m_cos(double x) { return double(m_cos(float(x))); }
double m_tan(double x) { return double(m_tan(float(x))); }
double m_asin(double x) { return double(m_asin(float(x))); }
double m_acos(double x) { return double(m_acos(float(x))); }
double m_atan(double x) { return double(m_atan(float(x))); }
double m_atan2(double y, double x) { return double(m_atan2(float(y), float(x))); }
double m_tanh(double x) { return double(m_tanh(float(x))); }
double m_sinh(double x) { return double(m_sinh(float(x))); }
double m_cosh(double x) { return double(m_cosh(float(x))); }
double m_log2(double x) { return double(m_log2(float(x))); }
double m_log10(double x) { return double(m_log10(float(x))); }
double m_pow(double a, double b) { return double(m_pow(float(a), float(b))); }
double m_fmod(double a, double b) { return double(m_fmod(float(a), float(b))); }
double m_erf(double x) { return double(m_erf(float(x))); }
double m_floor(double x) { return floor(x); }
double m_ceil(double x) { return ceil(x); }
double m_rint(double x) { return roundEven(x); }
bool m_isnan(double x) { return isnan(x); }
bool m_isinf(double x) { return isinf(x); }
