# Finds the Debian packages strata builds on (scripts/setup.sh installs them). Each find is the way
# was measured to work on Debian 12.
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED)
find_package(dnnl CONFIG REQUIRED)  # needs ocl-icd-opencl-dev beside libdnnl-dev
find_package(PkgConfig REQUIRED)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
find_package(ZLIB REQUIRED)
# libdeflate (libdeflate-dev) inflates whole GZIP/ZLIB TFRecord files, one member per call (2x zlib's speed).
pkg_check_modules(LIBDEFLATE IMPORTED_TARGET libdeflate)
if(NOT LIBDEFLATE_FOUND)
  message(FATAL_ERROR "libdeflate not found (pkg-config libdeflate): install libdeflate-dev (scripts/setup.sh does)")
endif()
# ISA-L (libisal-dev): crc32_iscsi, the CRC-32C of TFRecord files and of the tensors in safetensors files, and
# crc32_gzip_refl, the CRC-32 of the gzip members data inflates.
pkg_check_modules(ISAL IMPORTED_TARGET libisal)
if(NOT ISAL_FOUND)
  message(FATAL_ERROR "ISA-L not found (pkg-config libisal): install libisal-dev (scripts/setup.sh does)")
endif()
# libzip (libzip-dev): the zip container of NumPy's .npz archives (stored or deflated members), io/npz.cc.
pkg_check_modules(LIBZIP IMPORTED_TARGET libzip)
if(NOT LIBZIP_FOUND)
  message(FATAL_ERROR "libzip not found (pkg-config libzip): install libzip-dev (scripts/setup.sh does)")
endif()
# libjpeg-turbo (libjpeg62-turbo-dev) and libpng (libpng-dev) decode the image folders' JPEG and PNG files.
find_package(JPEG REQUIRED)
find_package(PNG REQUIRED)
find_package(Protobuf REQUIRED)  # CMake's module: protobuf::libprotobuf, protobuf_generate()
# gRPC (libgrpc++-dev, protobuf-compiler-grpc): the coordination service; its protoc plugin generates stubs.
find_package(gRPC CONFIG REQUIRED)
find_program(GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)
# OpenSSL (libssl-dev, which gRPC builds on): HMAC-SHA256 and SHA-256 of the job secret, and its random bytes.
find_package(OpenSSL REQUIRED)
# Gloo (libgloo-dev): collectives over TCP between processes; target `gloo` (not namespaced).
find_package(Gloo CONFIG REQUIRED)
# OpenMPI (libopenmpi-dev, openmpi-bin): the "mpi" comm backend for processes started by mpirun; MPI::MPI_CXX
# (strata uses the C bindings only: OMPI_SKIP_MPICXX=1, src/CMakeLists.txt).
find_package(MPI COMPONENTS CXX REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(CLI11 REQUIRED)
