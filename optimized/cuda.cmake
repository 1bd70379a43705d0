# mlaconf_optimized: the CUDA pipeline. Few .cu files (two architectures on two cores compile slowly).
# Only core/ is linked: optimized/ shares no math with reference/.
# CMake 3.25 predates nvcc's C++20 flag: teach it (nvcc 12+ accepts -std=c++20).
if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
endif()
file(GLOB MLACONF_OPT_SRCS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cu ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
add_library(mlaconf_optimized STATIC ${MLACONF_OPT_SRCS})
target_include_directories(mlaconf_optimized PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(mlaconf_optimized PUBLIC mlaconf_core CUDA::cudart_static CUDA::cublas)
target_compile_options(mlaconf_optimized PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo --expt-relaxed-constexpr -Xcompiler=-Wall,-Wno-unused-parameter>)
# --fmad=true (nvcc's default, stated): a plain a*b+c in kernel code may become one FMA. Where the bits must match
# a reference that rounds twice (dequant, routing) the kernels use the _rn intrinsics (MUL_RN / ADD_RN in
# common.cuh, __fmul_rn, __fadd_rn), which nvcc never contracts; where they want an FMA they say fmaf.
target_compile_options(mlaconf_optimized PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--fmad=true>)
target_compile_definitions(mlaconf_optimized PUBLIC MLACONF_HAVE_CUDA=1)
# The kernel benchmark (bench/kernel_bench.cu), built here (this folder's CUDA 20 set-up) so that it
# cannot rot; a GPU host without the project's dev packages builds it with nvcc alone
# (bench/gpu_kernel_bench.sh).
add_executable(mlaconf_kernel_bench ${PROJECT_SOURCE_DIR}/bench/kernel_bench.cu)
target_link_libraries(mlaconf_kernel_bench PRIVATE mlaconf_optimized)
target_compile_options(mlaconf_kernel_bench PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)
