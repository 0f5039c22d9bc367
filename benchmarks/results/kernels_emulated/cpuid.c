#include <stdio.h>
#include <string.h>
#include <cpuid.h>
int main(void){
  unsigned a,b,c,d; char v[13];
  __cpuid(0,a,b,c,d); memcpy(v,&b,4); memcpy(v+4,&d,4); memcpy(v+8,&c,4); v[12]=0;
  unsigned maxl=a;
  __cpuid(1,a,b,c,d);
  unsigned fam=((a>>8)&0xf)+((a>>20)&0xff), model=((a>>4)&0xf)|(((a>>16)&0xf)<<4);
  int fma=(c>>12)&1, avx=(c>>28)&1, f16c=(c>>29)&1;
  int avx2=0,avx512f=0,bmi2=0;
  if(maxl>=7){__cpuid_count(7,0,a,b,c,d); avx2=(b>>5)&1; bmi2=(b>>8)&1; avx512f=(b>>16)&1;}
  printf("vendor=%s family=%u model=0x%x fma=%d avx=%d f16c=%d avx2=%d bmi2=%d avx512f=%d\n",v,fam,model,fma,avx,f16c,avx2,bmi2,avx512f);
  return 0;
}
