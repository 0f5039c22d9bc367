#include <immintrin.h>
#include <stdio.h>
#include <stdint.h>
/* hash results of vsqrtps, vrsqrtps, vrcpps, vfmadd231ps over many inputs */
static uint64_t fnv(uint64_t h, const void*p, int n){const unsigned char*c=p;for(int i=0;i<n;i++){h^=c[i];h*=1099511628211ULL;}return h;}
int main(void){
  uint64_t hs=1469598103934665603ULL, hr=hs, hc=hs, hf=hs; uint32_t seed=1; int nd_sqrt=0;
  for(int it=0; it<100000; it++){
    float a[8],b[8],c[8];
    for(int k=0;k<8;k++){seed=seed*1664525u+1013904223u; a[k]=(seed>>8)*(1.0f/16777216.0f)*100.0f+1e-3f; seed=seed*1664525u+1013904223u; b[k]=(seed>>8)*(1.0f/16777216.0f)-0.5f; c[k]=a[k]*0.37f;}
    __m256 va=_mm256_loadu_ps(a), vb=_mm256_loadu_ps(b), vc=_mm256_loadu_ps(c); float o[8];
    _mm256_storeu_ps(o,_mm256_sqrt_ps(va)); hs=fnv(hs,o,32);
    _mm256_storeu_ps(o,_mm256_rsqrt_ps(va)); hr=fnv(hr,o,32);
    _mm256_storeu_ps(o,_mm256_rcp_ps(va)); hc=fnv(hc,o,32);
    _mm256_storeu_ps(o,_mm256_fmadd_ps(va,vb,vc)); hf=fnv(hf,o,32);
  }
  printf("vsqrtps=%016llx vrsqrtps=%016llx vrcpps=%016llx vfmadd231ps=%016llx\n",(unsigned long long)hs,(unsigned long long)hr,(unsigned long long)hc,(unsigned long long)hf);
}
