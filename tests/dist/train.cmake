# tests/dist/train.cmake (issue 19), included by tests/dist/CMakeLists.txt: data-parallel
# training under mpirun.
#   test_ddp          em_ddp_* on a small model, 2 ranks: the gradients are the average of the
#                     ranks' (computed locally from every rank's data), buckets of every size, a
#                     parameter unused on one rank, one unused on all
#   test_train_dist   ember-train --distributed, 2 ranks (and 3, oversubscribed) against one
#                     process with the same global batch: the same loss after 200 steps
# Their environment is the collectives' (EMBER_DIST_TEST_ENV, tests/dist/CMakeLists.txt): root
# allowed, and under sanitizers the options that let tests/lsan.supp reach Open MPI's leaks at
# exit, passed to every rank (EMBER_DIST_MPIEXEC_ARGS; test_train_dist.sh passes them itself).
add_executable(test_ddp ${CMAKE_CURRENT_LIST_DIR}/test_ddp.c)
target_link_libraries(test_ddp PRIVATE ember_dist_static PkgConfig::CMOCKA)
target_compile_options(test_ddp PRIVATE ${EMBER_WARN})
target_compile_definitions(test_ddp PRIVATE _GNU_SOURCE)
add_test(NAME test_ddp
         COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${EMBER_DIST_MPIEXEC_ARGS} ${MPIEXEC_PREFLAGS}
                 $<TARGET_FILE:test_ddp> ${MPIEXEC_POSTFLAGS})
set_tests_properties(test_ddp PROPERTIES TIMEOUT 300 ENVIRONMENT "${EMBER_DIST_TEST_ENV}")
if(TARGET ember-train)
  add_test(NAME test_train_dist
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_train_dist.sh $<TARGET_FILE:ember-train>
                   ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG})
  set_tests_properties(test_train_dist PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${EMBER_DIST_TEST_ENV}")
endif()
